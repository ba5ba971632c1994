// SPDX-License-Identifier: Apache-2.0
#include "jit_cache/cubin_check.hpp"

#include <elf.h>

#include <cstring>

namespace graphattn::detail {
namespace {

#ifndef EM_CUDA
#define EM_CUDA 190
#endif

// The ELF ABI versions of NVIDIA's cubins place the SM number in e_flags: version 8 (CUDA 12.8
// and later) in bits 8..15, earlier versions in bits 0..7.
uint32_t arch_of(const Elf64_Ehdr& h) {
  return h.e_ident[EI_ABIVERSION] >= 8 ? (h.e_flags >> 8) & 0xff : h.e_flags & 0xff;
}

// Whether a table of `count` records of `entry` bytes at `offset` lies inside `size` bytes.
bool table_fits(uint64_t offset, uint64_t count, uint64_t entry, uint64_t size) {
  if (count == 0) return true;
  if (offset > size) return false;
  return count <= (size - offset) / entry;
}

}  // namespace

bool check_cubin(const char* data, size_t size, uint32_t arch, std::string* why) {
  auto fail = [&](const std::string& w) {
    if (why) *why = "payload is not a cubin for sm_" + std::to_string(arch) + ": " + w;
    return false;
  };
  Elf64_Ehdr h;
  if (size < sizeof h) return fail(std::to_string(size) + " bytes are shorter than an ELF header");
  std::memcpy(&h, data, sizeof h);
  if (std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0) return fail("no ELF magic");
  if (h.e_ident[EI_CLASS] != ELFCLASS64) return fail("not a 64-bit ELF image");
  if (h.e_ident[EI_DATA] != ELFDATA2LSB) return fail("not little-endian");
  if (h.e_machine != EM_CUDA)
    return fail("ELF machine " + std::to_string(h.e_machine) + ", not CUDA (190)");
  if (h.e_type != ET_EXEC) return fail("ELF type " + std::to_string(h.e_type) + ", not executable");
  if (h.e_ehsize != sizeof h) return fail("ELF header size " + std::to_string(h.e_ehsize));
  if (h.e_shnum != 0 && h.e_shentsize != sizeof(Elf64_Shdr))
    return fail("section header size " + std::to_string(h.e_shentsize));
  if (h.e_phnum != 0 && h.e_phentsize != sizeof(Elf64_Phdr))
    return fail("program header size " + std::to_string(h.e_phentsize));
  if (!table_fits(h.e_shoff, h.e_shnum, sizeof(Elf64_Shdr), size))
    return fail("section headers beyond the payload's " + std::to_string(size) + " bytes");
  if (!table_fits(h.e_phoff, h.e_phnum, sizeof(Elf64_Phdr), size))
    return fail("program headers beyond the payload's " + std::to_string(size) + " bytes");
  const uint32_t got = arch_of(h);
  if (got != arch) return fail("built for sm_" + std::to_string(got));
  return true;
}

}  // namespace graphattn::detail
