// SPDX-License-Identifier: Apache-2.0
// The disk-entry reader: check_entry_prefix (the fixed header against the file size, before any
// large allocation), decode_entry (checksums, key, the cubin check) and check_cubin.
//
// The first byte picks what the rest is:
//   even: a whole file image as it could lie on disk. An accepted image re-encodes to itself.
//   odd:  fields of an entry (arch, spec length, spec) and a payload, encoded with valid sums, so
//         that the fuzzer gets past the checksums to the header and cubin checks. The decoded
//         header must equal what was encoded, and it is accepted exactly when the payload passes
//         check_cubin for its arch.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "jit_cache/cubin_check.hpp"
#include "jit_cache/entry_format.hpp"
#include "tests/fuzz/fuzz_common.hpp"

using graphattn::detail::EntryHeader;
using graphattn::detail::EntryStatus;
using graphattn::fuzz::broken;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool fields = data[0] & 1;
  const char* p = reinterpret_cast<const char*>(data) + 1;
  size_t n = size - 1;
  if (!fields) {
    const std::vector<char> img(p, p + n);
    uint32_t header_bytes = 0;
    std::string why;
    const EntryStatus prefix = graphattn::detail::check_entry_prefix(
        img.data(), img.size(), img.size(), &header_bytes, &why);
    EntryHeader h;
    std::vector<char> payload;
    const EntryStatus s = graphattn::detail::decode_entry(img, nullptr, &h, &payload, &why);
    if (prefix != EntryStatus::kOk && s != prefix) broken("prefix and whole decode disagree");
    if (s == EntryStatus::kOk) {
      if (header_bytes + payload.size() != img.size()) broken("lengths");
      if (graphattn::detail::encode_entry(h, payload) != img)
        broken("accepted image does not re-encode");
      if (!graphattn::detail::check_cubin(payload.data(), payload.size(), h.arch, nullptr))
        broken("accepted a payload that is not a cubin");
    }
    return 0;
  }
  if (n < 5) return 0;
  EntryHeader h;
  std::memcpy(&h.arch, p, 4);
  const size_t spec_bytes = static_cast<unsigned char>(p[4]);
  p += 5;
  n -= 5;
  if (spec_bytes > n) return 0;
  h.spec.assign(p, spec_bytes);
  h.key.high = 0x0123456789abcdefull;
  h.key.low = spec_bytes;
  const std::vector<char> payload(p + spec_bytes, p + n);
  const std::vector<char> img = graphattn::detail::encode_entry(h, payload);
  EntryHeader back;
  std::vector<char> got;
  std::string why;
  const EntryStatus s = graphattn::detail::decode_entry(img, &h.key, &back, &got, &why);
  const bool cubin =
      graphattn::detail::check_cubin(payload.data(), payload.size(), h.arch, nullptr);
  if (s == EntryStatus::kOk) {
    if (!cubin) broken("accepted a payload that is not a cubin");
    if (got != payload || back.spec != h.spec || back.arch != h.arch || back.key != h.key)
      broken("decoded fields differ from the encoded ones");
  } else if (s != EntryStatus::kBadCubin || cubin) {
    broken(std::string("a well-formed entry was refused: ") + graphattn::detail::to_string(s) +
           ": " + why);
  }
  return 0;
}
