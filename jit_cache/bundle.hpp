// SPDX-License-Identifier: Apache-2.0
// Kernel bundles: one file that carries verified cache entries from the machine that compiled
// them to images and hosts that should not compile (graphattn-cache export / import).
//
// A bundle is a POSIX ustar archive, so `tar tvf BUNDLE` lists it:
//   manifest.txt        always the first member (format below)
//   <key hex>.gakc      one member per entry: the exact disk entry image
//                       (jit_cache/entry_format.hpp, its own checksums included)
// Nothing else: no directories, links or other names are written or accepted.
//
// manifest.txt, lines of words separated by one space:
//   graphattn-kernel-bundle 1
//   cache-format <kCacheFormatVersion of the writer>
//   nvrtc <major>.<minor>             the writer's NVRTC
//   created <Unix ms>
//   entry <key hex> <arch> <member bytes> <SHA-256 hex of the member> <spec string>   (per entry)
//   signature <HMAC-SHA256 hex>       optional, last: over every byte of the lines above
// The members appear in the manifest's order. A reader checks the manifest first (header line,
// versions, every entry line, no key twice), then each member against its line (name, size,
// SHA-256), then the entry image as the disk tier checks a file (magic, checksums, key, a cubin
// for the stored arch) and that the stored spec parses and names the line's arch. With a signing
// key the signature line must be there and valid: a bundle from an untrusted channel cannot
// bring GPU code in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit_cache/entry_format.hpp"

namespace graphattn::detail {

// Limits a reader enforces before it allocates: the manifest's size and the entries' count.
constexpr size_t kMaxBundleManifestBytes = size_t{4} << 20;
constexpr size_t kMaxBundleEntries = 100000;

struct BundleEntry {
  EntryHeader header;
  std::vector<char> payload;  // the cubin
};

// Writes `entries` to `path` atomically (a temp file beside it, fsync, rename; mode 0644), signed
// when signing_key is not empty. Throws graphattn::Error naming the path on failure.
void write_bundle(const std::string& path, const std::vector<BundleEntry>& entries,
                  const std::string& signing_key, int64_t created_ms);

// One member of a bundle as a reader judged it.
struct BundleMember {
  enum class Verdict {
    kOk,     // verified; this build would look it up under its key
    kStale,  // verified, but for another NVRTC or compiled from other template text: this build
             // never looks it up
    kBad     // failed a check: never installed
  };
  Verdict verdict = Verdict::kBad;
  std::string reason;  // why kStale or kBad
  std::string key_hex;
  std::string spec;
  uint32_t arch = 0;
  BundleEntry entry;  // filled for kOk and kStale
};
const char* to_string(BundleMember::Verdict v);

struct Bundle {
  uint32_t cache_format = 0;
  int nvrtc_major = 0;
  int nvrtc_minor = 0;
  int64_t created_ms = 0;
  bool signed_ = false;
  std::vector<BundleMember> members;  // in the manifest's order
};

// Reads and checks a bundle. Throws graphattn::Error, naming the path and what is wrong, when the
// file is not a bundle this version can read (not a regular file, not ustar, a malformed or
// missing manifest, a member that is not in the manifest or out of its order, a missing member)
// or, with a signing key, when the signature is missing or wrong; then nothing in it may be used.
// A member that fails its own checks is kBad, with the reason, and the others are still judged.
Bundle read_bundle(const std::string& path, const std::string& signing_key);
// The same over a bundle's bytes (the fuzz target); `name` is used in messages.
Bundle parse_bundle(const std::string& bytes, const std::string& signing_key,
                    const std::string& name);

}  // namespace graphattn::detail
