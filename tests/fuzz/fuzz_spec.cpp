// SPDX-License-Identifier: Apache-2.0
// AttentionSpec::parse on arbitrary bytes: an accepted string is canonical and valid; a rejected
// one gets a printable, bounded message.
#include <cstddef>
#include <cstdint>
#include <string>

#include "graphattn/error.hpp"
#include "graphattn/spec.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const graphattn::AttentionSpec s = graphattn::AttentionSpec::parse(text);
    if (s.to_string() != text) graphattn::fuzz::broken("accepted a non-canonical spec: " + text);
    s.validate();
    if (graphattn::AttentionSpec::parse(s.to_string()) != s) graphattn::fuzz::broken("round trip");
  } catch (const graphattn::Error& e) {
    graphattn::fuzz::check_message(e.what());
  }
  return 0;
}
