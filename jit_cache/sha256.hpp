// SPDX-License-Identifier: Apache-2.0
// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): the tags that sign remote cache values
// (jit_cache/remote_tier.hpp). Checked against the FIPS and RFC 4231 test vectors in
// tests/test_sha256.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace graphattn::detail {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  Sha256Digest finish();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(const void* data, size_t size);

// HMAC-SHA256 of the concatenation of `parts` (each a byte string) under `key`.
Sha256Digest hmac_sha256(const std::string& key, std::initializer_list<std::string_view> parts);

// Compares two digests in time independent of where they differ.
bool digests_equal(const Sha256Digest& a, const Sha256Digest& b);

std::string hex_of(const Sha256Digest& d);

}  // namespace graphattn::detail
