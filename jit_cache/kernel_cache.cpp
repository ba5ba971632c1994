// SPDX-License-Identifier: Apache-2.0
// KernelCache: the memory tier with single flight, over the disk tier, over NVRTC.
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/env_flag.hpp"
#include "core/spec_axes.hpp"
#include "core/text.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/log.hpp"
#include "jit_cache/byte_size.hpp"
#include "jit_cache/disk_tier.hpp"
#include "jit_cache/nvrtc_compiler.hpp"
#include "jit_cache/redis_client.hpp"
#include "jit_cache/remote_tier.hpp"
#include "jit_cache/thread_pool.hpp"

namespace graphattn {

using detail::DiskTier;
using detail::EntryHeader;
using detail::EntryStatus;
using detail::RemoteStatus;
using detail::RemoteTier;

namespace {

struct KeyHash {
  size_t operator()(const CacheKey& k) const { return static_cast<size_t>(k.low ^ k.high); }
};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// GRAPHATTN_CACHE_MAX_BYTES through the one size parser; 0 means no cap (as in ccache).
uint64_t max_bytes_from_env() {
  const char* text = env("GRAPHATTN_CACHE_MAX_BYTES");
  if (!text) return 2ull << 30;
  const uint64_t v = detail::parse_byte_size(text, "GRAPHATTN_CACHE_MAX_BYTES");
  return v == 0 ? UINT64_MAX : v;
}

// An absolute path, or nullptr: the XDG base directory rules ignore relative ones.
const char* absolute_env(const char* name) {
  const char* v = env(name);
  return v && v[0] == '/' ? v : nullptr;
}

void default_warn(const std::string& msg) { log(LogLevel::kWarning, msg); }

// Each layer holds a directory descriptor and costs a lookup per miss: a handful is what layering
// is for, and a long list would run the process out of descriptors (NVRTC needs some too).
constexpr size_t kMaxCacheLayers = 32;

void check_layer_count(size_t n, const char* where) {
  if (n > kMaxCacheLayers)
    throw Error(std::string(where) + " names " + std::to_string(n) +
                " cache directories; supported: at most " + std::to_string(kMaxCacheLayers) +
                " layers");
}

// GRAPHATTN_CACHE_DIRS: absolute paths separated by ':' (empty elements are skipped); a relative
// path, or more than kMaxCacheLayers of them, throws, like the other malformed cache variables.
std::vector<std::string> dirs_from_env() {
  std::vector<std::string> out;
  const char* text = env("GRAPHATTN_CACHE_DIRS");
  if (!text) return out;
  std::string all = text;
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(':', start);
    if (end == std::string::npos) end = all.size();
    const std::string d = all.substr(start, end - start);
    if (!d.empty()) {
      if (d[0] != '/')
        throw Error("GRAPHATTN_CACHE_DIRS element '" + detail::printable(d) +
                    "' is not an absolute path; supported: absolute directories separated by ':'");
      out.push_back(d);
    }
    start = end + 1;
  }
  check_layer_count(out.size(), "GRAPHATTN_CACHE_DIRS");
  return out;
}

}  // namespace

std::vector<std::string> cache_dirs_from_env() { return dirs_from_env(); }

std::string default_cache_dir() {
  if (const char* d = env("GRAPHATTN_CACHE_DIR")) {
    // Relative to whatever directory the process happens to start in: refused, not guessed.
    if (d[0] != '/')
      throw Error("GRAPHATTN_CACHE_DIR '" + detail::printable(d, 4096) +
                  "' is not an absolute path; supported: an absolute directory, or unset");
    return d;
  }
  if (const char* x = absolute_env("XDG_CACHE_HOME")) return std::string(x) + "/graphattn";
  if (const char* h = absolute_env("HOME")) return std::string(h) + "/.cache/graphattn";
  // No shared fallback such as /tmp: another user could have planted entries there.
  return "";
}

// GRAPHATTN_REMOTE_CACHE, checked; "" when unset.
std::string remote_url_from_env() {
  const char* url = env("GRAPHATTN_REMOTE_CACHE");
  if (!url) return "";
  try {
    detail::parse_redis_url(url);
  } catch (const Error& e) {
    throw Error(std::string("GRAPHATTN_REMOTE_CACHE: ") + e.what());  // the password is masked
  }
  return url;
}

// The signing secret from the options' file, else GRAPHATTN_CACHE_SIGNING_KEY's; "" for none.
std::string signing_key(const std::string& file, bool shared) {
  if (!file.empty()) return detail::read_signing_key(file, shared);
  if (const char* f = env("GRAPHATTN_CACHE_SIGNING_KEY"))
    return detail::read_signing_key(f, shared);
  return "";
}

std::string cache_signing_key(const std::string& file) {
  return signing_key(file, detail::shared_cache_requested());
}

void check_cache_environment() {
  max_bytes_from_env();
  dirs_from_env();
  default_cache_dir();
  const bool shared = detail::shared_cache_requested();
  detail::env_flag("GRAPHATTN_DUMP_SOURCE");
  remote_url_from_env();
  signing_key("", shared);
}

bool remote_available(std::string* why) { return detail::redis_client_loadable(why); }

const char* to_string(CacheOrigin o) {
  static const char* const kNames[] = {"memory", "hit", "compiled", "remote"};
  return detail::enum_name(o, kNames);
}

using KernelPtr = std::shared_ptr<const CompiledKernel>;

namespace {

// A fleet lock still held after this many times the longest compile this process knows of is
// stale: its holder died without an expiry, or someone squats it.
constexpr int kStaleLockFactor = 4;
constexpr std::chrono::milliseconds kMinLockWait{2000};

// Held while this process compiles a key for the whole fleet; released however that ends.
struct RemoteLock {
  RemoteTier* tier = nullptr;
  CacheKey key;
  RemoteLock() = default;
  RemoteLock(const RemoteLock&) = delete;
  RemoteLock& operator=(const RemoteLock&) = delete;
  ~RemoteLock() {
    if (tier) tier->unlock(key);
  }
};

}  // namespace

struct KernelCache::Impl {
  CacheOptions opts;
  std::vector<std::unique_ptr<DiskTier>> layers;  // usable ones, in search order
  DiskTier* writer = nullptr;                     // the first writable layer
  std::unique_ptr<RemoteTier> remote;             // after the disk layers, or null
  mutable std::mutex mu;
  std::unordered_map<CacheKey, std::shared_future<KernelPtr>, KeyHash> entries;
  // detail::packed_spec(spec) -> key, for specs that validated and rendered once in this process:
  // the fast index, so that a hit costs neither rendering the source nor hashing it. A spec that
  // does not pack (0) is invalid anyway and takes the slow path, which rejects it.
  std::unordered_map<uint64_t, CacheKey> by_spec;
  CacheStats stats;
  // The longest compile this process measured or read from an entry's header (ms): what bounds
  // the wait on another process's fleet lock.
  double longest_compile_ms = 0;
  bool stale_lock_warned = false;

  // One request that missed memory: the steps of KernelCache::get below the memory tier.
  struct Request {
    const AttentionSpec& spec;
    const KernelSource& src;
    const CacheKey& key;
    CacheOrigin* origin;
    bool bad_entry = false;  // a layer held a bad entry for the key (the compile repairs it)
  };
  KernelPtr load_or_compile(Request& r);
  KernelPtr make(const Request& r, const EntryHeader& h, std::vector<char> cubin);
  KernelPtr from_disk(Request& r);
  KernelPtr from_remote(Request& r);
  KernelPtr wait_for_fleet(Request& r, RemoteLock* held);
  std::chrono::milliseconds fleet_wait_bound(std::string* why);
  void warn_stale_lock(const CacheKey& key, const std::string& why);
  KernelPtr compile_and_store(Request& r);
  std::vector<char> compile(const Request& r, EntryHeader* h);
  void store(const Request& r, const EntryHeader& h, const std::vector<char>& cubin);
  void note_compile_ms(double ms);
};

KernelCache::KernelCache(CacheOptions options) : impl_(new Impl) {
  impl_->opts = std::move(options);
  CacheOptions& o = impl_->opts;
  if (!o.warn) {
    // One warning per cache object, whatever goes wrong afterwards.
    auto once = std::make_shared<std::once_flag>();
    o.warn = [once](const std::string& m) { std::call_once(*once, default_warn, m); };
  }
  if (o.max_bytes == 0) o.max_bytes = max_bytes_from_env();
  o.dump_source = o.dump_source || detail::env_flag("GRAPHATTN_DUMP_SOURCE");
  o.shared_dir = o.shared_dir || detail::shared_cache_requested();
  if (o.use_disk) {
    // Options first (dirs, then dir), then GRAPHATTN_CACHE_DIRS, then default_cache_dir().
    const std::vector<std::string> from_env = dirs_from_env();
    std::vector<std::string> dirs = o.dirs;
    check_layer_count(dirs.size(), "CacheOptions::dirs");
    if (dirs.empty() && !o.dir.empty()) dirs.push_back(o.dir);
    if (dirs.empty()) dirs = from_env;
    if (dirs.empty()) {
      o.dir = default_cache_dir();
      if (!o.dir.empty()) dirs.push_back(o.dir);
    }
    if (dirs.empty())
      o.warn(
          "graphattn: no cache directory (GRAPHATTN_CACHE_DIRS, GRAPHATTN_CACHE_DIR, "
          "XDG_CACHE_HOME and HOME are unset or not absolute); the kernel cache runs in memory "
          "only");
    std::string read_only;
    for (const std::string& d : dirs) {
      auto tier = std::make_unique<DiskTier>(d, o.warn, o.shared_dir);
      if (!tier->usable()) continue;
      if (!tier->writable())
        read_only += (read_only.empty() ? "" : ", ") + detail::printable(d, 4096) + " (" +
                     tier->read_only_why() + ")";
      else if (!impl_->writer)
        impl_->writer = tier.get();
      impl_->layers.push_back(std::move(tier));
    }
    if (o.use_package_kernels)
      for (const std::string& d : package_kernel_dirs()) {
        if (std::find(dirs.begin(), dirs.end(), d) != dirs.end()) continue;
        auto tier =
            std::make_unique<DiskTier>(d, o.warn, o.shared_dir, DiskTier::Access::kReadOnly);
        if (tier->usable()) impl_->layers.push_back(std::move(tier));
      }
    if (!impl_->writer && !read_only.empty())
      o.warn("graphattn: no writable cache directory: " + read_only +
             " serve their verified entries; kernels compiled now are kept in memory only");
  }
  if (o.use_remote) {
    if (o.remote_url.empty()) o.remote_url = remote_url_from_env();
    if (!o.remote_url.empty()) {
      detail::RemoteOptions ro;
      ro.url = o.remote_url;
      ro.timeout = o.remote_timeout;
      ro.retry = o.remote_retry;
      ro.signing_key = signing_key(o.signing_key_file, o.shared_dir);
      auto remote = std::make_unique<RemoteTier>(std::move(ro), o.warn);  // checks the URL
      std::string why;
      if (detail::redis_client_loadable(&why))
        impl_->remote = std::move(remote);
      else
        o.warn("graphattn: remote kernel cache " + remote->where() + " is configured but " + why +
               "; using the local tiers only");
    }
  }
}

KernelCache::~KernelCache() = default;

std::shared_ptr<const CompiledKernel> KernelCache::get(const AttentionSpec& spec,
                                                       CacheOrigin* origin) {
  const uint64_t packed = detail::packed_spec(spec);
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    auto known = impl_->by_spec.find(packed);
    if (packed != 0 && known != impl_->by_spec.end()) {
      auto it = impl_->entries.find(known->second);
      if (it != impl_->entries.end()) {
        ++impl_->stats.memory_hits;
        std::shared_future<KernelPtr> f = it->second;
        lock.unlock();
        KernelPtr k = f.get();
        if (origin) *origin = CacheOrigin::kMemory;
        return k;
      }
    }
  }
  const KernelSource src = render_kernel(spec);  // validates
  const CacheKey key = kernel_key(src, spec.arch);

  std::promise<KernelPtr> promise;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    auto it = impl_->entries.find(key);
    if (it != impl_->entries.end()) {
      ++impl_->stats.memory_hits;
      std::shared_future<KernelPtr> f = it->second;
      lock.unlock();
      KernelPtr k = f.get();  // waits for the one compile in flight; rethrows its failure
      if (origin) *origin = CacheOrigin::kMemory;
      return k;
    }
    impl_->entries.emplace(key, promise.get_future().share());
    if (packed != 0) impl_->by_spec[packed] = key;
  }
  try {
    KernelPtr k = load_or_compile(spec, src, key, origin);
    promise.set_value(k);
    return k;
  } catch (...) {
    // Waiters see this failure; the next request tries again.
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->entries.erase(key);
    throw;
  }
}

// disk -> (disk lock, disk again) -> remote -> fleet lock or wait -> compile. Each step returns the
// kernel when it found one, else null.
KernelPtr KernelCache::load_or_compile(const AttentionSpec& spec, const KernelSource& src,
                                       const CacheKey& key, CacheOrigin* origin) {
  Impl::Request r{spec, src, key, origin};
  return impl_->load_or_compile(r);
}

KernelPtr KernelCache::Impl::load_or_compile(Request& r) {
  if (KernelPtr k = from_disk(r)) return k;
  DiskTier::Lock file_lock;
  if (writer) {
    file_lock = writer->lock(r.key, opts.lock_timeout);
    // Another process may have compiled it while we waited for the lock.
    r.bad_entry = false;
    if (KernelPtr k = from_disk(r)) return k;
  }
  RemoteLock fleet_lock;
  if (remote) {
    if (KernelPtr k = from_remote(r)) return k;
    if (KernelPtr k = wait_for_fleet(r, &fleet_lock)) return k;
  }
  return compile_and_store(r);
}

KernelPtr KernelCache::Impl::make(const Request& r, const EntryHeader& h, std::vector<char> cubin) {
  auto k = std::make_shared<CompiledKernel>();
  k->key = r.key;
  k->spec = r.spec;
  k->spec_string = r.src.spec;
  k->entry = r.src.entry;
  k->cubin = std::move(cubin);
  k->compiled_at_ms = h.compiled_at_ms;
  k->compile_ms = static_cast<double>(h.compile_us) / 1000.0;
  note_compile_ms(k->compile_ms);
  return KernelPtr(std::move(k));
}

void KernelCache::Impl::note_compile_ms(double ms) {
  std::lock_guard<std::mutex> lock(mu);
  // An entry's header is data from elsewhere: an absurd time there cannot stretch the wait past
  // lock_timeout (fleet_wait_bound clamps it).
  if (ms > longest_compile_ms) longest_compile_ms = ms;
}

// Every layer in order: the first verified entry wins; a bad one is never served.
KernelPtr KernelCache::Impl::from_disk(Request& r) {
  for (const auto& layer : layers) {
    EntryHeader h;
    std::vector<char> cubin;
    const EntryStatus s = layer->read(r.key, &h, &cubin, nullptr);
    if (s == EntryStatus::kOk && h.spec == r.src.spec &&
        h.arch == static_cast<uint32_t>(r.spec.arch)) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++stats.disk_hits;
      }
      if (r.origin) *r.origin = CacheOrigin::kDisk;
      return make(r, h, std::move(cubin));
    }
    if (s != EntryStatus::kMissing) r.bad_entry = true;
  }
  return nullptr;
}

// A verified remote value whose header names this spec and arch, also written to disk; a value
// that fails is deleted by the tier (or here, for a header of another spec) and never served.
KernelPtr KernelCache::Impl::from_remote(Request& r) {
  EntryHeader h;
  std::vector<char> cubin;
  const RemoteStatus s = remote->get(r.key, &h, &cubin, nullptr);
  if (s == RemoteStatus::kHit && h.spec == r.src.spec &&
      h.arch == static_cast<uint32_t>(r.spec.arch)) {
    if (writer && writer->write(h, cubin)) writer->evict(opts.max_bytes, &r.key);
    if (r.origin) *r.origin = CacheOrigin::kRemote;
    return make(r, h, std::move(cubin));
  }
  if (s == RemoteStatus::kHit) remote->reject(r.key);
  return nullptr;
}

// How long to wait for another process's compile: kStaleLockFactor times the longest compile
// known here (at least kMinLockWait), half of lock_timeout while none is known, never more
// than lock_timeout.
std::chrono::milliseconds KernelCache::Impl::fleet_wait_bound(std::string* why) {
  double longest = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    longest = longest_compile_ms;
  }
  *why = longest > 0 ? std::to_string(kStaleLockFactor) +
                           " times the longest compile known here, at least " +
                           std::to_string(kMinLockWait.count()) + " ms"
                     : "half the lock timeout: no compile time is known here yet";
  std::chrono::milliseconds bound =
      longest > 0 ? std::max(kMinLockWait, std::chrono::milliseconds(static_cast<int64_t>(
                                               std::min(longest * kStaleLockFactor, 1e9))))
                  : opts.lock_timeout / 2;
  if (bound >= opts.lock_timeout) *why = "the lock timeout";
  return std::min(bound, opts.lock_timeout);
}

void KernelCache::Impl::warn_stale_lock(const CacheKey& key, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stale_lock_warned) return;
    stale_lock_warned = true;
  }
  opts.warn("graphattn: remote kernel cache " + remote->where() + ": the lock " +
            detail::remote_lock_name(key) + " " + why +
            "; compiling locally (later stale locks are not reported)");
}

// Takes the fleet lock (into *held), or waits for the process that holds it to store the kernel.
// A lock without an expiry (graphattn never writes one) is not waited for, and a lock that
// outlasts fleet_wait_bound() is given up on: both are compiled here after all, with one warning.
KernelPtr KernelCache::Impl::wait_for_fleet(Request& r, RemoteLock* held) {
  using Clock = std::chrono::steady_clock;
  RemoteTier::LockResult result = remote->lock(r.key, opts.lock_timeout);
  std::string bound_why;
  const std::chrono::milliseconds bound = fleet_wait_bound(&bound_why);
  const auto deadline = Clock::now() + bound;
  auto pause = std::chrono::milliseconds(20);
  bool waited = false;
  while (result == RemoteTier::LockResult::kHeldByOther) {
    waited = true;
    const RemoteTier::LockState state = remote->lock_state(r.key);
    if (state == RemoteTier::LockState::kNoExpiry) {
      warn_stale_lock(r.key, "has no expiry, so no graphattn process wrote it");
      return nullptr;
    }
    if (state == RemoteTier::LockState::kFree) {
      result = remote->lock(r.key, opts.lock_timeout);
      // Freed: its holder stored the kernel first (read below), or its lock expired.
      if (result != RemoteTier::LockResult::kHeldByOther) break;
    }
    if (Clock::now() >= deadline) {
      warn_stale_lock(r.key, "is still held after " + std::to_string(bound.count()) + " ms (" +
                                 bound_why + ")");
      return nullptr;
    }
    std::this_thread::sleep_for(std::min(
        pause, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
    pause = std::min(pause * 2, std::chrono::milliseconds(250));
    if (KernelPtr k = from_remote(r)) return k;
  }
  if (result == RemoteTier::LockResult::kAcquired) {
    // Set in place: assigning a temporary RemoteLock would unlock at once in its destructor.
    held->key = r.key;
    held->tier = remote.get();
    // A holder stores the kernel before it lets go of the lock.
    if (waited) return from_remote(r);
  }
  return nullptr;
}

// NVRTC; a failure is counted (and its source dumped when asked) and rethrown.
std::vector<char> KernelCache::Impl::compile(const Request& r, EntryHeader* h) {
  {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.misses;
  }
  double ms = 0;
  std::vector<char> cubin;
  try {
    cubin = detail::nvrtc_compile(r.src, &ms);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.compile_failures;
    if (writer && opts.dump_source) writer->write_source(r.key, r.src.source);
    throw;
  }
  h->key = r.key;
  h->arch = static_cast<uint32_t>(r.spec.arch);
  const auto [major, minor] = nvrtc_version();
  h->nvrtc_major = static_cast<uint32_t>(major);
  h->nvrtc_minor = static_cast<uint32_t>(minor);
  h->compiled_at_ms = detail::now_unix_ms();
  h->compile_us = static_cast<uint64_t>(ms * 1000.0);
  h->spec = r.src.spec;
  return cubin;
}

// A new kernel to the writable layer (evicting past the size cap) and to the fleet.
void KernelCache::Impl::store(const Request& r, const EntryHeader& h,
                              const std::vector<char>& cubin) {
  uint64_t evicted = 0;
  bool write_failed = false;
  if (writer) {
    if (opts.dump_source) writer->write_source(r.key, r.src.source);
    if (writer->write(h, cubin))
      evicted = writer->evict(opts.max_bytes, &r.key);
    else
      write_failed = true;
  }
  if (remote) remote->put(h, cubin);
  std::lock_guard<std::mutex> lock(mu);
  ++stats.compiles;
  stats.compile_ms += static_cast<double>(h.compile_us) / 1000.0;
  stats.evictions += evicted;
  stats.write_failures += write_failed ? 1 : 0;
  if (r.bad_entry) ++stats.repairs;
}

KernelPtr KernelCache::Impl::compile_and_store(Request& r) {
  EntryHeader h;
  std::vector<char> cubin = compile(r, &h);
  store(r, h, cubin);
  if (r.origin) *r.origin = CacheOrigin::kCompiled;
  return make(r, h, std::move(cubin));
}

std::vector<PrecompileResult> KernelCache::precompile(const std::vector<AttentionSpec>& specs,
                                                      unsigned threads) {
  return precompile(specs, threads, PrecompileDone());
}

std::vector<PrecompileResult> KernelCache::precompile(const std::vector<AttentionSpec>& specs,
                                                      unsigned threads,
                                                      const PrecompileDone& on_done) {
  std::vector<PrecompileResult> results(specs.size());
  std::mutex done_mu;  // on_done and the debug lines, one at a time
  detail::parallel_for(specs.size(), threads, [&](size_t i) {
    PrecompileResult& r = results[i];
    const auto t0 = std::chrono::steady_clock::now();
    try {
      r.spec = specs[i].to_string();
      get(specs[i], &r.origin);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(done_mu);
    if (log_enabled(LogLevel::kDebug)) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f", r.ms);
      log(LogLevel::kDebug,
          "graphattn: precompile " + (r.spec.empty() ? "spec #" + std::to_string(i) : r.spec) +
              ": " + (r.error.empty() ? to_string(r.origin) : "failed") + " in " + ms + " ms");
    }
    if (on_done) on_done(i, r);
  });
  return results;
}

CacheStats KernelCache::stats() const {
  CacheStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    s = impl_->stats;
  }
  if (impl_->remote) {
    const detail::RemoteCounters r = impl_->remote->counters();
    s.remote_hits = r.hits;
    s.remote_misses = r.misses;
    s.remote_rejects = r.rejects;
    s.remote_puts = r.puts;
    s.remote_errors = r.errors;
    s.remote_ms = r.ms;
  }
  return s;
}

std::string KernelCache::remote() const { return impl_->remote ? impl_->remote->where() : ""; }

std::string KernelCache::dir() const { return impl_->writer ? impl_->writer->dir() : ""; }

bool KernelCache::disk_enabled() const { return !impl_->layers.empty(); }

std::vector<KernelCache::Layer> KernelCache::layers() const {
  std::vector<Layer> out;
  for (const auto& l : impl_->layers) out.push_back({l->dir(), l->writable()});
  return out;
}

std::vector<std::string> package_kernel_dirs() {
  std::string image;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&package_kernel_dirs), &info) && info.dli_fname &&
      info.dli_fname[0] == '/')
    image = info.dli_fname;
  if (image.empty()) {  // the main executable (a tool linking the static library)
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) image.assign(buf, static_cast<size_t>(n));
  }
  std::vector<std::string> out;
  char resolved[PATH_MAX];
  if (image.empty() || !::realpath(image.c_str(), resolved)) return out;
  std::string dir = resolved;
  for (int up = 0; up < 2; ++up) {
    dir = dir.substr(0, dir.find_last_of('/'));  // the image's directory, then its parent
    if (dir.empty()) break;
    const std::string parent = dir.substr(0, dir.find_last_of('/'));
    const std::string candidate = (parent.empty() ? "" : parent) + "/graphattn_kernels/cache";
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
        std::find(out.begin(), out.end(), candidate) == out.end())
      out.push_back(candidate);
  }
  return out;
}

KernelCache& default_kernel_cache() {
  static KernelCache cache;
  return cache;
}

}  // namespace graphattn
