// SPDX-License-Identifier: Apache-2.0
// What a cache entry's payload must be before it reaches cuModuleLoadData: a 64-bit
// little-endian ELF executable for the CUDA machine, built for the entry's arch, whose header
// tables lie inside the payload. The check reads only the ELF header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace graphattn::detail {

// True when data is a cubin for `arch`; otherwise false and *why says what is wrong.
bool check_cubin(const char* data, size_t size, uint32_t arch, std::string* why);

}  // namespace graphattn::detail
