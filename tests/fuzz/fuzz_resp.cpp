// SPDX-License-Identifier: Apache-2.0
// The Redis client's reply parser (jit_cache/redis_client.hpp) fed what a hostile server could
// send: any bytes, in pieces of any size. Every input either yields replies within the limits or
// throws RedisError; nothing larger than the limits is allocated (libFuzzer's -rss_limit_mb and
// -malloc_limit_mb catch one that is), and messages are printable.
//
// The first byte picks the limits: a small bulk cap, a small element budget and a depth.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "jit_cache/redis_client.hpp"
#include "tests/fuzz/fuzz_common.hpp"

using graphattn::detail::RedisError;
using graphattn::detail::RedisLimits;
using graphattn::detail::RedisReply;
using graphattn::detail::RespParser;
using graphattn::fuzz::broken;

namespace {

void check(const RedisReply& r, const RedisLimits& l, int depth, uint64_t* elements) {
  if (r.type == RedisReply::Type::kString && r.str.size() > l.max_bulk_bytes)
    broken("a bulk string over the limit");
  if (r.type == RedisReply::Type::kArray) {
    if (depth >= l.max_depth) broken("arrays nested past the limit");
    *elements += r.elements.size();
    if (*elements > l.max_elements) broken("more elements than the limit");
    for (const RedisReply& e : r.elements) check(e, l, depth + 1, elements);
  } else if (!r.elements.empty()) {
    broken("elements under a reply that is not an array");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  RedisLimits limits;
  limits.max_bulk_bytes = 1u << (data[0] & 15);
  limits.max_elements = (data[0] >> 4) * 8;
  limits.max_depth = (data[0] >> 6) + 1;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t at = 0;
  // Pieces of 1..7 bytes, as a dripping server sends them.
  RespParser parser([&](char* out, size_t n) -> size_t {
    if (at == bytes.size()) throw RedisError("the server closed the connection");
    const size_t k = std::min(std::min(n, bytes.size() - at), size_t{1} + (at % 7));
    std::copy(bytes.data() + at, bytes.data() + at + k, out);
    at += k;
    return k;
  });
  for (int replies = 0; replies < 64; ++replies) {
    try {
      const RedisReply r = parser.parse(limits);
      uint64_t elements = 0;
      check(r, limits, 0, &elements);
    } catch (const RedisError& e) {
      graphattn::fuzz::check_message(e.what());
      break;
    }
  }
  return 0;
}
