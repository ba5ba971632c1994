// SPDX-License-Identifier: Apache-2.0
// The kernel bundle reader (jit_cache/bundle.hpp): the ustar walk, the manifest and its signature,
// and each member's checks. Any input either throws graphattn::Error or yields members whose
// verdicts agree with their contents.
//
// The first byte picks the signing key: odd, the key "fuzz signing key"; even, none.
#include <cstddef>
#include <cstdint>
#include <string>

#include "graphattn/error.hpp"
#include "jit_cache/bundle.hpp"
#include "tests/fuzz/fuzz_common.hpp"

using graphattn::detail::BundleMember;
using graphattn::fuzz::broken;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string key = (data[0] & 1) ? "fuzz signing key" : "";
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const auto bundle = graphattn::detail::parse_bundle(bytes, key, "fuzz.tar");
    if (!key.empty() && !bundle.signed_) broken("an unsigned bundle passed with a key");
    for (const BundleMember& m : bundle.members) {
      if (m.verdict == BundleMember::Verdict::kBad) continue;
      if (m.entry.header.key.hex() != m.key_hex) broken("a member under another key's name");
      if (m.entry.header.spec != m.spec || m.entry.header.arch != m.arch)
        broken("a member whose header differs from its manifest line");
    }
  } catch (const graphattn::Error&) {
  }
  return 0;
}
