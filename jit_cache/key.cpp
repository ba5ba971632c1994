// SPDX-License-Identifier: Apache-2.0
// The cache key: XXH3-128 over every input that determines the machine code. Each field is
// length-prefixed so that no two different input lists hash the same byte stream.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

#include "graphattn/jit.hpp"

namespace graphattn {
namespace {

void feed(XXH3_state_t* st, const void* data, uint64_t size) {
  XXH3_128bits_update(st, &size, sizeof size);
  XXH3_128bits_update(st, data, size);
}
void feed(XXH3_state_t* st, const std::string& s) { feed(st, s.data(), s.size()); }
void feed(XXH3_state_t* st, int64_t v) { feed(st, &v, sizeof v); }

}  // namespace

std::string CacheKey::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return buf;
}

CacheKey make_key(const KeyInputs& in) {
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset(&st);
  feed(&st, std::string("graphattn-kernel-cache"));
  feed(&st, static_cast<int64_t>(in.format_version));
  feed(&st, in.spec);
  feed(&st, in.source);
  feed(&st, static_cast<int64_t>(in.options.size()));
  for (const auto& o : in.options) feed(&st, o);
  feed(&st, static_cast<int64_t>(in.arch));
  feed(&st, static_cast<int64_t>(in.nvrtc_major));
  feed(&st, static_cast<int64_t>(in.nvrtc_minor));
  const XXH128_hash_t h = XXH3_128bits_digest(&st);
  return CacheKey{h.high64, h.low64};
}

CacheKey kernel_key(const KernelSource& src, int arch) {
  const auto [major, minor] = nvrtc_version();
  return make_key({src.spec, src.source, src.options, arch, major, minor, kCacheFormatVersion});
}

}  // namespace graphattn
