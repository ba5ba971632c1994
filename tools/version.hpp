// SPDX-License-Identifier: Apache-2.0
// The line every tool prints for --version: the tool, the library version, the C ABI version,
// the NVRTC it runs with (part of every cache key) and the cache format.
#pragma once

#include <string>

#include "graphattn/graphattn.h"
#include "graphattn/jit.hpp"

namespace graphattn::tools {

inline std::string version_text(const std::string& tool) {
  const auto [major, minor] = nvrtc_version();
  return tool + " " + graphattn_version() + " (C ABI " + std::to_string(graphattn_abi_version()) +
         ", NVRTC " + std::to_string(major) + "." + std::to_string(minor) + ", cache format " +
         std::to_string(kCacheFormatVersion) + ")";
}

}  // namespace graphattn::tools
