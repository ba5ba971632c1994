// SPDX-License-Identifier: Apache-2.0
// What CacheDirectory (graphattn/jit.hpp) holds: shared by its inspection and bundle calls
// (inspect.cpp) and RemoteCacheClient's push and pull (remote_cache.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graphattn/jit.hpp"
#include "jit_cache/disk_tier.hpp"

namespace graphattn {

struct CacheDirectory::Impl {
  Impl(std::string dir, bool shared);
  // The directory as the kernel cache uses it: trusted, and created when `create`; Error (as
  // require_usable() says) when it cannot be used.
  std::unique_ptr<detail::DiskTier> open_for_use(bool create) const;
  // Writes an entry that `local` lacks: true when written, false when it was there; Error when
  // it cannot be written.
  bool install(detail::DiskTier& local, const detail::EntryHeader& h,
               const std::vector<char>& payload) const;

  std::string given;      // the directory as the caller named it (for messages)
  detail::DiskTier tier;  // the inspector
};

}  // namespace graphattn
