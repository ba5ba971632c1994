// SPDX-License-Identifier: Apache-2.0
// What the parts of graphattn-cache share. main.cpp sets up the command line (the usage and the
// exit statuses are described there) and dispatches to the commands: inspect.cpp (list, show,
// stats), maintain.cpp (verify, prune, clear), compile.cpp and remote.cpp (push, pull, the remote
// part of stats). entries.cpp opens the cache
// directory and judges its entries; output.cpp formats for people and for --json.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/printable.hpp"
#include "graphattn/spec.hpp"
#include "tools/cache/output.hpp"

namespace graphattn::tools::cache_tool {

// The tool sees the library through its public API only (graphattn/jit.hpp): its CMake target has
// no path to the library's private headers.
using EntryInfo = graphattn::CacheEntryInfo;
using graphattn::CacheDirectory;
using graphattn::printable;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Wrong usage that CLI11 cannot see (a value with the wrong form, a missing choice): exit 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Everything the command line chose.
struct Options {
  std::string dir;
  bool json = false;
  std::string target;  // show
  bool fix = false;    // verify
  bool force = false;  // clear, prune, verify --fix: also in an unmarked directory
  // stats, verify: every layer of GRAPHATTN_CACHE_DIRS when --dir is not given, else {dir}.
  std::vector<std::string> layers;
  bool skip_remote = false;     // stats of one layer among several: the remote part is shown once
  std::string max_bytes_text;   // prune
  double older_than_days = -1;  // prune; negative: not given
  std::vector<std::string> specs;   // compile
  std::vector<std::string> models;  // compile: every kernel of these built-in models
  std::vector<int> archs;           // compile/export --model: target archs (default {90})
  int block_size = 16;              // compile --model
  std::string dtype = "bf16";       // compile --model
  std::string kv_dtype = "auto";    // compile --model
  unsigned threads = 0;             // compile; 0: hardware threads
  bool dump_source = false;         // compile
  std::string remote;               // redis://... (default GRAPHATTN_REMOTE_CACHE)
  std::string signing_key_file;     // default GRAPHATTN_CACHE_SIGNING_KEY
  int remote_timeout_ms = 2000;     // connect and read timeout of the tool's calls
  std::string bundle;               // export, import: the bundle file
  bool dry_run = false;             // import: verify and report, install nothing
};

// ---------------------------------------------------------------------------------------------
// The directory

// Whether dir exists (as a directory); wrong usage when it is empty or names something else.
bool require_directory_path(const std::string& dir);

// The cache directory as the commands see it: opened for inspection whatever its owner and mode
// (verify reports those). A missing directory is an empty cache and is not created by any
// command but compile; a path that is not a directory is wrong usage.
class CacheDir {
 public:
  CacheDir(std::string dir, bool need_write);

  const std::string& path() const { return dir_; }
  bool exists() const { return dir_handle_ != nullptr; }
  // The directory, for the calls that change it; null when it does not exist.
  const CacheDirectory* directory() const { return dir_handle_.get(); }
  std::vector<EntryInfo> entries() const {
    return dir_handle_ ? dir_handle_->list() : std::vector<EntryInfo>{};
  }
  // The files in the directory (not "." and ".."), sorted by name.
  std::vector<graphattn::CacheFile> files() const {
    return dir_handle_ ? dir_handle_->files() : std::vector<graphattn::CacheFile>{};
  }
  // "" or what is wrong with the directory's owner or mode.
  std::string trust_problem() const { return dir_handle_ ? dir_handle_->trust_problem() : ""; }
  // Before a command removes `names` (files of this directory): throws graphattn::Error, naming
  // them, when the directory is not a graphattn cache (no marker, not an earlier version's cache;
  // CacheDirectory::is_cache) and --force was not given.
  void require_cache(const Options& o, const char* command,
                     const std::vector<std::string>& names) const;

 private:
  std::string dir_;
  std::unique_ptr<CacheDirectory> dir_handle_;
};

// ---------------------------------------------------------------------------------------------
// Entries

// An entry's verdict. Beyond the file checks (magic, version, lengths, checksums, key), the stored
// spec string must parse (or name a retired kind) and name the stored arch.
struct Check {
  bool ok = true;
  std::string status;  // "ok", "retired kind", a disk-tier status, "bad spec" or "arch mismatch"
  std::string reason;
};

Check check_entry(const EntryInfo& e);
// The kernel kind of the stored spec: "retired" for a kind this version no longer builds,
// "unknown" when the entry is unreadable or its spec does not parse.
std::string kind_of(const EntryInfo& e);
// Whether this build would look the entry up under the same key: false when it was compiled from
// another template text or by another NVRTC (it will never be hit again); null when this build
// cannot render the spec (no template for its kind).
Json is_current(const EntryInfo& e);
// Every field of an entry, as list, show, verify and prune print it.
Json entry_json(const EntryInfo& e);
// The entries' file sizes together.
uint64_t total_bytes(const std::vector<EntryInfo>& entries);

// ---------------------------------------------------------------------------------------------
// Commands: each returns the exit status; wrong usage throws UsageError, any other failure
// graphattn::Error.

int cmd_list(const Options& o);
int cmd_show(const Options& o);
int cmd_stats(const Options& o);
int cmd_verify(const Options& o);
int cmd_prune(const Options& o);
int cmd_clear(const Options& o);
int cmd_compile(const Options& o);
int cmd_push(const Options& o);
int cmd_pull(const Options& o);
int cmd_export(const Options& o);
int cmd_import(const Options& o);

// The specs --spec and --model (for every --arch) name, without repeats; UsageError for a bad
// one.
std::vector<graphattn::AttentionSpec> requested_specs(const Options& o);
// The library's KernelCache on --dir (with the remote tier of --remote), collecting the warnings
// it gives; throws graphattn::Error when the directory cannot be used.
class ToolCache {
 public:
  explicit ToolCache(const Options& o);
  // Precompiles on threads() workers; throws when a compiled kernel could not be written.
  // on_done (optional) gets each result as soon as it is done (KernelCache::precompile).
  std::vector<graphattn::PrecompileResult> precompile(
      const std::vector<graphattn::AttentionSpec>& specs, double* wall_ms,
      const graphattn::KernelCache::PrecompileDone& on_done = {});
  unsigned threads() const;  // --threads, else one per core

  std::unique_ptr<graphattn::KernelCache> cache;
  std::vector<std::string> warnings;

 private:
  graphattn::Error disk_failure() const;
  const Options& o_;
  std::mutex mu_;
};

// The secret of --signing-key, else of GRAPHATTN_CACHE_SIGNING_KEY; "" when neither is set.
std::string signing_secret(const Options& o);
// The directory --dir, required usable as the kernel cache uses it (trusted; created when
// `create`); throws graphattn::Error when it cannot be used (or written, when `create`).
std::unique_ptr<CacheDirectory> open_local(const Options& o, bool create);
// The remote tier for `stats`: configured, built in, reachable, entries and bytes.
Json remote_stats(const Options& o);
void print_remote_stats(const Json& remote);

}  // namespace graphattn::tools::cache_tool
