// SPDX-License-Identifier: Apache-2.0
// The kernel cache: AttentionSpec -> rendered CUDA source -> NVRTC -> cubin, kept in memory and
// on disk under a 128-bit XXH3 key.
//
//   get(spec): memory tier (hit: return) -> disk tier (valid entry: load)
//              -> per-key cross-process lock -> disk again
//              -> remote tier on Redis, when configured (valid value: load, write to disk)
//              -> fleet-wide lock on Redis -> NVRTC -> temp file, fsync, rename; put to Redis
//
// Thread-safe: concurrent callers of one key wait for a single compile. Safe across processes
// sharing one directory: an advisory lock per key makes one of them compile, and a corrupt,
// truncated or foreign file is a miss that is repaired, never served.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graphattn/export.h"
#include "graphattn/spec.hpp"

namespace graphattn {

// XXH3-128 of everything that determines the machine code (see make_key()).
struct GRAPHATTN_API CacheKey {
  uint64_t high = 0;
  uint64_t low = 0;
  std::string hex() const;  // 32 lowercase hex digits, high word first
  bool operator==(const CacheKey& o) const { return high == o.high && low == o.low; }
  bool operator!=(const CacheKey& o) const { return !(*this == o); }
};

// Bumped whenever the file layout or the meaning of a key changes.
constexpr uint32_t kCacheFormatVersion = 1;

// What goes into a key. Exposed so tests can show that each input changes it.
struct GRAPHATTN_API KeyInputs {
  std::string spec;                  // canonical spec string
  std::string source;                // fully rendered source text
  std::vector<std::string> options;  // every NVRTC option, in order
  int arch = 0;
  int nvrtc_major = 0;
  int nvrtc_minor = 0;
  uint32_t format_version = kCacheFormatVersion;
};
GRAPHATTN_API CacheKey make_key(const KeyInputs& in);

// A rendered kernel, ready for NVRTC.
struct GRAPHATTN_API KernelSource {
  std::string spec;                  // canonical spec string
  std::string entry;                 // the extern "C" kernel name inside
  std::string source;                // full text; the NVRTC options are written into it
  std::vector<std::string> options;  // NVRTC options
};
GRAPHATTN_API KernelSource render_kernel(const AttentionSpec& spec);

// The NVRTC this process is linked with (major, minor).
GRAPHATTN_API std::pair<int, int> nvrtc_version();

// The cache key of a kernel rendered for `arch` (the spec's arch), compiled by this process's
// NVRTC in this cache format: the one recipe that the cache and graphattn-cache use.
GRAPHATTN_API CacheKey kernel_key(const KernelSource& src, int arch);

// Where a cubin came from on this request.
enum class CacheOrigin { kMemory, kDisk, kCompiled, kRemote };
GRAPHATTN_API const char* to_string(CacheOrigin o);

// A compiled kernel: the cubin and its provenance. Immutable and shared.
struct GRAPHATTN_API CompiledKernel {
  CacheKey key;
  AttentionSpec spec;
  std::string spec_string;
  std::string entry;
  std::vector<char> cubin;
  int64_t compiled_at_ms = 0;  // Unix time, milliseconds
  double compile_ms = 0;       // NVRTC wall time when it was compiled
};

struct GRAPHATTN_API CacheOptions {
  // Empty: GRAPHATTN_CACHE_DIR (absolute; a relative one throws Error), else
  // $XDG_CACHE_HOME/graphattn, else ~/.cache/graphattn (those two only when absolute); with none
  // of them, memory only. The directory is used only if nobody else
  // can write it: owned by this user (or root), not writable by group or others (created 0700,
  // entries 0600). Otherwise one warning, and the cache runs in memory only.
  std::string dir;
  // Layered directories, searched in this order; the first writable one receives new kernels
  // (non-empty: `dir` is not used). With neither `dirs` nor `dir` set, GRAPHATTN_CACHE_DIRS
  // (absolute paths separated by ':', e.g. "/opt/graphattn/kernels:/home/me/.cache/graphattn")
  // comes before GRAPHATTN_CACHE_DIR and the defaults above; more than 32 layers throw Error.
  // Each layer must pass the same trust
  // rules (a root-owned directory that is not writable by group or others is trusted). A layer this
  // process cannot write (a read-only image layer or mount) still serves its verified entries.
  std::vector<std::string> dirs;
  // A directory deliberately shared by a group (also GRAPHATTN_CACHE_SHARED=1): group-writable
  // (setgid, e.g. 2770) is accepted, world-writable never, and the directory must be owned by this
  // user or root or belong to one of this process's groups. It trusts every member of the group:
  // any of them can write an entry that this process will load and run.
  bool shared_dir = false;
  // false: memory only.
  bool use_disk = true;
  // 0: GRAPHATTN_CACHE_MAX_BYTES (bytes, or with a K, M, G or T suffix; 0 there means no cap),
  // else 2 GiB. Oldest-used entries are evicted past it. A malformed value throws Error.
  uint64_t max_bytes = 0;
  // How long to wait for another process compiling the same key before compiling anyway. On the
  // remote tier's fleet lock the wait is also bounded by 4 times the longest compile known here,
  // and a lock without an expiry is not waited for (one warning names it).
  std::chrono::milliseconds lock_timeout{60000};
  // Write each compiled source next to its entry (also GRAPHATTN_DUMP_SOURCE=1, or true/yes/on).
  bool dump_source = false;
  // Search the prebuilt kernels installed beside the library (package_kernel_dirs()) as
  // read-only layers after the others.
  bool use_package_kernels = true;
  // Receives warnings (read-only directory, lock timeout, remote server down). Default: one
  // line on stderr.
  std::function<void(const std::string&)> warn;

  // The remote tier, shared by a fleet: redis://[[user]:password@]host[:port][/db]. Empty:
  // GRAPHATTN_REMOTE_CACHE; neither set, or use_remote false: no remote tier. A malformed URL
  // throws Error (its password masked in the message). Needs a build with the Redis client
  // (remote_available() says why not); without it, one warning and the local tiers only. Values
  // are verified like disk entries; only get() (prepare, precompile) reaches the server, never
  // forward().
  std::string remote_url;
  bool use_remote = true;
  // The deadline of every call to the server as a whole (connecting, sending, and reading the
  // whole reply), however slowly the server sends.
  std::chrono::milliseconds remote_timeout{500};
  // After a failed call the tier stays off (one warning) and tries again after this back-off,
  // doubled after each failed retry up to 10 minutes.
  std::chrono::milliseconds remote_retry{30000};
  // A file holding the secret that signs remote values (HMAC-SHA256); then only values with a
  // valid tag are accepted. Empty: GRAPHATTN_CACHE_SIGNING_KEY. Without a key, every process that
  // can write the Redis database can give this process GPU code to run. The file must be a
  // regular file (not a link) owned by this user or root, mode 0600 (0640 in shared mode), with a
  // secret of at least 16 bytes and 8 distinct byte values; otherwise the constructor throws.
  std::string signing_key_file;
};

struct GRAPHATTN_API CacheStats {
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t misses = 0;    // not in memory nor on disk: compiled
  uint64_t compiles = 0;  // NVRTC runs that produced a cubin
  uint64_t compile_failures = 0;
  uint64_t repairs = 0;  // bad disk entries found and replaced
  uint64_t evictions = 0;
  double compile_ms = 0;        // total NVRTC wall time
  uint64_t write_failures = 0;  // compiled kernels that could not be written to disk
  uint64_t remote_hits = 0;     // verified values from the remote tier
  uint64_t remote_misses = 0;   // asked the remote tier, not there
  uint64_t remote_rejects = 0;  // remote values that failed verification (deleted, recompiled)
  uint64_t remote_puts = 0;     // kernels stored to the remote tier
  uint64_t remote_errors = 0;   // failed calls to the server (each starts a back-off)
  double remote_ms = 0;         // wall time spent in calls to the server
};

struct GRAPHATTN_API PrecompileResult {
  std::string spec;
  CacheOrigin origin = CacheOrigin::kCompiled;
  double ms = 0;      // wall time of this request
  std::string error;  // empty on success
};

class GRAPHATTN_API KernelCache {
 public:
  explicit KernelCache(CacheOptions options = {});
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // The compiled kernel for spec (validated first). Throws Error or CompileError.
  std::shared_ptr<const CompiledKernel> get(const AttentionSpec& spec,
                                            CacheOrigin* origin = nullptr);

  // Compiles (or finds) every spec on a pool of `threads` workers (0: hardware threads).
  // Never throws for a single spec's failure: it is reported in its result.
  std::vector<PrecompileResult> precompile(const std::vector<AttentionSpec>& specs,
                                           unsigned threads = 0);
  // The same, calling on_done(index into specs, its result) as soon as each spec is finished
  // (hit, compiled or failed), from the worker that finished it, one call at a time; the tools
  // print each kernel's line from it. on_done must not throw.
  using PrecompileDone = std::function<void(size_t, const PrecompileResult&)>;
  std::vector<PrecompileResult> precompile(const std::vector<AttentionSpec>& specs,
                                           unsigned threads, const PrecompileDone& on_done);

  CacheStats stats() const;
  // The directory new kernels are written to, or "" when none is writable (memory only, or
  // read-only layers only).
  std::string dir() const;
  // Whether any directory serves entries (a writable one or a read-only layer).
  bool disk_enabled() const;
  // Every directory in use, in search order, and whether this process writes it.
  struct Layer {
    std::string dir;
    bool writable = false;
  };
  std::vector<Layer> layers() const;
  // The remote tier's URL (password masked), or "" when there is none.
  std::string remote() const;

 private:
  std::shared_ptr<const CompiledKernel> load_or_compile(const AttentionSpec& spec,
                                                        const KernelSource& src,
                                                        const CacheKey& key, CacheOrigin* origin);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Where prebuilt kernels installed with a package are looked for, without configuration: the
// graphattn-kernels wheel puts a cache directory at site-packages/graphattn_kernels/cache, found
// from libgraphattn.so in site-packages/graphattn/ or a tool in site-packages/graphattn/bin/
// (the image holding this code, then its parent's parent). Only directories that exist.
GRAPHATTN_API std::vector<std::string> package_kernel_dirs();

// The process-wide cache used by the backends when none is given (default options).
GRAPHATTN_API KernelCache& default_kernel_cache();

// Throws Error naming the variable and its value when GRAPHATTN_CACHE_MAX_BYTES,
// GRAPHATTN_CACHE_SHARED, GRAPHATTN_CACHE_DIR (relative), GRAPHATTN_CACHE_DIRS,
// GRAPHATTN_DUMP_SOURCE or GRAPHATTN_REMOTE_CACHE is malformed or
// GRAPHATTN_CACHE_SIGNING_KEY names an unusable key file (KernelCache's constructor would throw
// the same); lets a program reject its environment before it starts any work.
GRAPHATTN_API void check_cache_environment();

// The default cache directory (environment applied), whether or not it exists; "" when there
// is none (no GRAPHATTN_CACHE_DIR, and no absolute XDG_CACHE_HOME or HOME). Throws Error for a
// relative GRAPHATTN_CACHE_DIR.
GRAPHATTN_API std::string default_cache_dir();

// Whether this build has the remote tier's Redis client and its library can be loaded; when not,
// *why (may be null) says what is missing.
GRAPHATTN_API bool remote_available(std::string* why = nullptr);

// GRAPHATTN_CACHE_DIRS as KernelCache reads it (absolute paths, at most 32); empty when unset.
// Throws Error when it is malformed.
GRAPHATTN_API std::vector<std::string> cache_dirs_from_env();

// The secret that signs remote values and bundles: from `file`, else from the file
// GRAPHATTN_CACHE_SIGNING_KEY names (as KernelCache reads it; GRAPHATTN_CACHE_SHARED=1 allows
// mode 0640); "" when neither is set. Throws Error naming the file when it is unusable.
GRAPHATTN_API std::string cache_signing_key(const std::string& file);

// A byte size as GRAPHATTN_CACHE_MAX_BYTES takes it: decimal digits, then an optional unit (B;
// K, KB, KiB; M, MB, MiB; G, GB, GiB; T, TB, TiB; any case; binary multiples). Throws Error
// "<what> '<text>' is not a size: <why>; use ...".
GRAPHATTN_API uint64_t parse_byte_size(const std::string& text, const std::string& what);

// ---- Inspecting a cache directory: what graphattn-cache and the C ABI's graphattn_cache_list
// use instead of the disk tier itself.

// GRAPHATTN_CACHE_SHARED=1 (a group-shared directory is accepted); unset, empty or 0: not.
// Anything else throws Error naming the value.
GRAPHATTN_API bool shared_cache_requested();

// The file that marks a directory as a graphattn cache: written when a cache creates the
// directory, finds it empty or adopts an earlier version's cache. Maintenance removes files only
// from a directory that is a cache (CacheDirectory::is_cache()), unless forced.
constexpr const char* kCacheMarkerName = ".graphattn-cache";

// What is at a path meant for a cache directory: nothing, a directory, or something else
// (*what, when not null, says what: "a regular file", "a FIFO", ...). Follows links. Throws
// Error "cannot read cache directory <path>: <why>" when it cannot be read.
enum class CachePathKind { kMissing, kDirectory, kOther };
GRAPHATTN_API CachePathKind cache_path_kind(const std::string& path, std::string* what = nullptr);

// One file of a cache directory, checked as the disk tier checks an entry before loading it.
struct GRAPHATTN_API CacheEntryInfo {
  std::string name;     // file name inside the directory
  std::string key_hex;  // 32 hex digits, from the name
  bool ok = false;      // header, checksums, owner, mode and cubin verify
  // The disk tier's verdict: "ok", "truncated", "bad magic", "format version mismatch",
  // "bad header", "key mismatch", "checksum mismatch", "I/O error", "not a regular file",
  // "untrusted", "too large", "bad cubin"; reason says more.
  std::string status;
  std::string reason;
  std::string spec;  // canonical spec string ("" when not ok)
  int arch = 0;      // 0 when not ok
  int nvrtc_major = 0, nvrtc_minor = 0;
  uint64_t file_bytes = 0;
  int64_t last_used_ms = 0;    // Unix time, milliseconds (refreshed on every disk hit)
  int64_t compiled_at_ms = 0;  // 0 when not ok
  // ok, and this build looks it up under its key (same NVRTC, same template text): an entry
  // that is ok but not current is stale, never loaded, and left out of exports.
  bool current = false;
  std::string path;             // the directory and the name
  std::string source_path;      // the source dumped beside it (a regular file), or ""
  uint64_t source_bytes = 0;    // its size, when source_path is set
  uint32_t format_version = 0;  // this and the header fields below: 0 when not ok
  uint64_t compile_us = 0;      // NVRTC wall time
  uint64_t payload_bytes = 0;   // the cubin's
  uint64_t payload_xxh3 = 0;    // the cubin's checksum
};

// A file of a cache directory by what its name says it is.
enum class CacheFileKind {
  kEntry,   // "*.gakc" (an entry, or a misnamed one that list() reports as bad)
  kLock,    // "<key>.lock"
  kSource,  // "<key>.cu", a dumped source
  kTemp,    // being written, or left by a writer that died
  kProbe,   // a write probe left by a process that died
  kOther    // not the cache's: maintenance never removes it (the marker is one)
};
struct GRAPHATTN_API CacheFile {
  std::string name;
  CacheFileKind kind = CacheFileKind::kOther;
  int64_t modified_ms = -1;  // Unix time, milliseconds (not following a link); -1: unreadable
};

// What removing a file did: removed, or not there (error empty), or failed (error says why).
struct GRAPHATTN_API CacheRemoval {
  bool removed = false;
  std::string error;
};

// What importing a bundle did, member by member.
struct GRAPHATTN_API BundleImport {
  struct Member {
    std::string key_hex, spec;
    int arch = 0;
    std::string verdict;  // "ok", "stale" (another NVRTC or template text) or "bad"
    std::string reason;   // why stale or bad
    std::string action;   // "installed", "present", "would install" (dry run), "not installed"
  };
  bool signed_bundle = false;
  int nvrtc_major = 0, nvrtc_minor = 0;  // the writer's
  uint32_t cache_format = 0;             // the writer's
  uint64_t installed = 0, present = 0, stale = 0, bad = 0;
  std::vector<Member> members;
};

// What exporting a directory wrote.
struct GRAPHATTN_API BundleExport {
  uint64_t entries = 0;      // written
  uint64_t cubin_bytes = 0;  // of their cubins
  uint64_t left_out = 0;     // entries of the directory that are bad or stale
  std::vector<std::string> specs;
};

// A cache directory opened for inspection: never created; read whatever its owner and mode
// (trust_problem() says what a cache would refuse); written only by the maintenance calls, by
// import_bundle() and by RemoteCacheClient::pull(). Bundles are signed ustar files (graphattn-cache
// export / import; the format: jit_cache/bundle.hpp). Every call throws Error naming the path
// on an I/O failure. Messages name the directory as it was given.
class GRAPHATTN_API CacheDirectory {
 public:
  // shared: accept a group-shared directory (also GRAPHATTN_CACHE_SHARED=1).
  explicit CacheDirectory(std::string dir, bool shared = false);
  ~CacheDirectory();
  CacheDirectory(const CacheDirectory&) = delete;
  CacheDirectory& operator=(const CacheDirectory&) = delete;

  const std::string& dir() const;
  bool exists() const;
  // Whether this user can write it (the maintenance calls can remove files).
  bool writable() const;
  // "" when a KernelCache would load from it; otherwise what is wrong and what is required.
  const std::string& trust_problem() const;
  // Whether graphattn made it: the marker (kCacheMarkerName), or an earlier version's cache
  // (every name one that graphattn writes, and at least one entry with graphattn's magic).
  bool is_cache() const;
  // Throws Error unless a KernelCache could use the directory as given: "cache directory <dir>
  // does not exist" (create false), or "the cache directory <dir> cannot be used: <why>"
  // (untrusted; with create, also missing and not creatable, or read-only). With create, a
  // missing directory is created as the kernel cache creates it.
  void require_usable(bool create) const;

  // Every file named like an entry, checked, sorted by file name.
  std::vector<CacheEntryInfo> list() const;
  // One entry by its key's 32 hex digits, checked (status "missing" when there is none).
  CacheEntryInfo verify(const std::string& key_hex) const;
  // Every name in the directory but "." and "..", sorted, with its kind.
  std::vector<CacheFile> files() const;
  // The source dumped beside an entry (at most 16 MiB, not following a link); throws Error
  // "cannot read <source_path>".
  std::string read_source(const CacheEntryInfo& entry) const;

  // Removes an entry with its lock and source files: true when it was there; throws Error
  // naming the file when it cannot.
  bool remove(const std::string& key_hex) const;
  // The same for an entry file by name (CacheEntryInfo::name, a misnamed one included),
  // reporting a failure instead of throwing.
  CacheRemoval remove_entry_file(const std::string& name) const;
  // One file or empty directory by name, never following a link.
  CacheRemoval remove_file(const std::string& name) const;
  // Temp files older than `age` (their writers died); returns how many were removed.
  uint64_t remove_stale_temps(std::chrono::seconds age) const;
  // Lock files without an entry that nobody holds; returns their names.
  std::vector<std::string> remove_orphan_locks() const;
  // Takes write permission for group and others away from the directory and the files in it that
  // this user owns, where the trust policy forbids it; returns what it changed ("path: 0775 ->
  // 0755") and re-checks the directory.
  std::vector<std::string> repair_modes() const;
  // Removes least recently used entries until the total is at most max_bytes; returns how many.
  uint64_t evict(uint64_t max_bytes) const;

  // Writes every current, verified entry into a bundle at `path` (atomically; signed with the
  // secret when signing_key is not empty). Throws Error when the directory cannot be used
  // (require_usable(false)) or holds no such entry.
  BundleExport export_bundle(const std::string& path, const std::string& signing_key) const;
  // Verifies every member of the bundle at `path` (the signature first when signing_key is not
  // empty) and writes the ok ones that the directory lacks (none with dry_run; otherwise the
  // directory is required usable, and created, as require_usable(true) does).
  BundleImport import_bundle(const std::string& path, const std::string& signing_key,
                             bool dry_run) const;

 private:
  friend class RemoteCacheClient;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes compiled kernels (KernelCache::get) into a bundle at `path`, as export_bundle() does.
GRAPHATTN_API BundleExport export_kernels(
    const std::string& path, const std::vector<std::shared_ptr<const CompiledKernel>>& kernels,
    const std::string& signing_key);

// "" when an entry's stored spec string parses and names the entry's arch; otherwise why not,
// and *status (when not null) is "bad spec" or "arch mismatch".
GRAPHATTN_API std::string entry_spec_problem(const std::string& spec, int arch,
                                             std::string* status = nullptr);

// ---- The remote tier (a Redis server shared by a fleet), as graphattn-cache sees it: its size,
// and copying verified entries between it and a cache directory.

struct GRAPHATTN_API RemoteCacheStats {
  bool available = false;  // the server answered
  std::string error;       // why not
  std::string server_version;
  uint64_t entries = 0;
  uint64_t bytes = 0;
};

// One entry that push() or pull() handled: status "ok" (pushed, pulled), "present" (pull: the
// directory has it), else what is wrong with it, and why.
struct GRAPHATTN_API RemoteTransfer {
  std::string name;  // the entry's file name (push) or the value's name on the server (pull)
  std::string status;
  std::string reason;
};

class GRAPHATTN_API RemoteCacheClient {
 public:
  // url: redis://[[user]:password@]host[:port][/db]; timeout: of each call as a whole;
  // signing_key: the secret itself (cache_signing_key()), "" for unsigned values. Throws Error
  // for a malformed URL (its password masked). Reaches the server only when called.
  RemoteCacheClient(const std::string& url, std::chrono::milliseconds timeout,
                    const std::string& signing_key);
  ~RemoteCacheClient();
  RemoteCacheClient(const RemoteCacheClient&) = delete;
  RemoteCacheClient& operator=(const RemoteCacheClient&) = delete;

  // The URL with its password masked.
  const std::string& where() const;
  bool signing() const;
  // The server's version and the entries' count and bytes (their lengths only: the values stay on
  // the server); a failed call is reported in the result, not thrown.
  RemoteCacheStats stats();
  // Stores each of `entries` (of dir, as list() gave them) that the kernel cache's reader
  // verifies, signed when signing(); one result per entry, in order. The directory must be
  // usable (require_usable(false)). Throws Error when the server fails.
  std::vector<RemoteTransfer> push(const CacheDirectory& dir,
                                   const std::vector<CacheEntryInfo>& entries);
  // Installs into dir every value of the server that verifies (checksums, signature when
  // signing(), spec and arch) and that dir lacks; one result per entry value on the server. The
  // directory is created and must be usable (require_usable(true)). Throws Error when the server
  // fails or an entry cannot be written.
  std::vector<RemoteTransfer> pull(const CacheDirectory& dir);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
}  // namespace graphattn
