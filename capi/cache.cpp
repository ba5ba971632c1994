// SPDX-License-Identifier: Apache-2.0
// The C ABI's kernel cache section: options, handles, counters, precompile, the entry list.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "capi.hpp"

using namespace graphattn::capi;

extern "C" {

void graphattn_cache_options_init(graphattn_cache_options_t* options) noexcept {
  if (!options) return;
  const graphattn::CacheOptions d;
  *options = graphattn_cache_options_t{};
  options->struct_size = sizeof(graphattn_cache_options_t);
  options->dir = nullptr;
  options->use_disk = d.use_disk ? 1 : 0;
  options->max_bytes = d.max_bytes;
  options->lock_timeout_ms = static_cast<int>(d.lock_timeout.count());
  options->dump_source = d.dump_source ? 1 : 0;
  options->shared_dir = d.shared_dir ? 1 : 0;
}

graphattn_status_t graphattn_cache_create(const graphattn_cache_options_t* options,
                                          graphattn_cache_t* cache) noexcept {
  return guard([&] {
    deref(cache, "cache") = nullptr;
    graphattn::CacheOptions o;
    if (options) {
      const graphattn_cache_options_t& c = sized(options, "options");
      if (c.lock_timeout_ms < 0)
        invalid("options->lock_timeout_ms " + std::to_string(c.lock_timeout_ms) + " must be >= 0");
      o.dir = c.dir ? c.dir : "";
      o.use_disk = c.use_disk != 0;
      o.max_bytes = c.max_bytes;
      o.lock_timeout = std::chrono::milliseconds(c.lock_timeout_ms);
      o.dump_source = c.dump_source != 0;
      o.shared_dir = c.shared_dir != 0;
    }
    const bool shared = o.shared_dir || graphattn::shared_cache_requested();
    auto handle = std::make_unique<graphattn_cache>();
    handle->shared_dir = shared;
    handle->owned = std::make_unique<graphattn::KernelCache>(std::move(o));
    handle->cache = handle->owned.get();
    *cache = handle.release();
  });
}

graphattn_status_t graphattn_cache_default(graphattn_cache_t* cache) noexcept {
  return guard([&] {
    deref(cache, "cache") = nullptr;
    static graphattn_cache shared{nullptr, &graphattn::default_kernel_cache(),
                                  graphattn::shared_cache_requested()};
    *cache = &shared;
  });
}

void graphattn_cache_destroy(graphattn_cache_t cache) noexcept {
  if (cache && cache->owned) delete cache;
}

graphattn_status_t graphattn_cache_stats(graphattn_cache_t cache,
                                         graphattn_cache_stats_t* stats) noexcept {
  return guard([&] {
    const graphattn::CacheStats s = deref(cache, "cache").cache->stats();
    graphattn_cache_stats_t& out = deref(stats, "stats");
    // Fields past the caller's struct_size are not written (an older caller's smaller struct).
    const auto put = [&](auto field, auto value) {
      if (holds(out, field)) out.*field = value;
    };
    if (out.struct_size < offsetof(graphattn_cache_stats_t, memory_hits) + sizeof(uint64_t))
      invalid("stats->struct_size " + std::to_string(out.struct_size) +
              " leaves no room for a counter; set it to sizeof(graphattn_cache_stats_t)");
    put(&graphattn_cache_stats_t::memory_hits, s.memory_hits);
    put(&graphattn_cache_stats_t::disk_hits, s.disk_hits);
    put(&graphattn_cache_stats_t::misses, s.misses);
    put(&graphattn_cache_stats_t::compiles, s.compiles);
    put(&graphattn_cache_stats_t::compile_failures, s.compile_failures);
    put(&graphattn_cache_stats_t::repairs, s.repairs);
    put(&graphattn_cache_stats_t::evictions, s.evictions);
    put(&graphattn_cache_stats_t::compile_ms, s.compile_ms);
    put(&graphattn_cache_stats_t::write_failures, s.write_failures);
  });
}

graphattn_status_t graphattn_cache_dir(graphattn_cache_t cache, char* buf, size_t capacity,
                                       size_t* needed) noexcept {
  return guard([&] {
    copy_string(deref(cache, "cache").cache->dir(), buf, capacity, needed, "the cache directory");
  });
}

graphattn_status_t graphattn_cache_precompile(graphattn_cache_t cache, const char* const* specs,
                                              size_t num_specs, unsigned threads,
                                              graphattn_precompile_result_t* results) noexcept {
  return guard([&] {
    graphattn::KernelCache& kc = *deref(cache, "cache").cache;
    if (num_specs > 0) deref(specs, "specs");
    for (size_t i = 0; i < num_specs; ++i)
      if (!specs[i]) invalid("specs[" + std::to_string(i) + "] is NULL");
    // Strings the parser rejects fail alone; the others compile together on the pool.
    std::vector<graphattn::PrecompileResult> done(num_specs);
    std::vector<graphattn::AttentionSpec> parsed;
    std::vector<size_t> parsed_index;
    for (size_t i = 0; i < num_specs; ++i) {
      done[i].spec = specs[i];
      try {
        parsed.push_back(graphattn::AttentionSpec::parse(specs[i]));
        parsed_index.push_back(i);
      } catch (const graphattn::Error& e) {
        done[i].error = e.what();
      }
    }
    const std::vector<graphattn::PrecompileResult> compiled = kc.precompile(parsed, threads);
    for (size_t j = 0; j < compiled.size(); ++j) done[parsed_index[j]] = compiled[j];
    size_t failures = 0;
    const graphattn::PrecompileResult* first = nullptr;
    for (size_t i = 0; i < num_specs; ++i) {
      const graphattn::PrecompileResult& r = done[i];
      if (!r.error.empty() && !failures++) first = &r;
      if (!results) continue;
      results[i] = graphattn_precompile_result_t{};
      results[i].origin = static_cast<graphattn_cache_origin_t>(r.origin);
      results[i].ms = r.ms;
      results[i].ok = r.error.empty() ? 1 : 0;
      copy_fixed(results[i].error, r.error);
    }
    if (first)
      throw graphattn::Error(std::to_string(failures) + " of " + std::to_string(num_specs) +
                             " specs failed; the first, " + first->spec + ": " + first->error);
  });
}

graphattn_status_t graphattn_cache_list(graphattn_cache_t cache, graphattn_cache_entry_t* entries,
                                        size_t capacity, size_t* count) noexcept {
  return guard([&] {
    const graphattn_cache& c = deref(cache, "cache");
    const std::string dir = c.cache->dir();  // "" unless the cache trusted and uses it
    std::vector<graphattn::CacheEntryInfo> found;
    if (!dir.empty()) found = graphattn::CacheDirectory(dir, c.shared_dir).list();
    copy_array(found.size(), capacity, count, entries == nullptr, "cache entries", [&](size_t i) {
      const graphattn::CacheEntryInfo& e = found[i];
      graphattn_cache_entry_t& out = entries[i];
      out = graphattn_cache_entry_t{};
      copy_fixed(out.key, e.key_hex);
      copy_fixed(out.spec, e.spec);
      out.arch = e.arch;
      out.ok = e.ok ? 1 : 0;
      copy_fixed(out.status, e.status);
      out.file_bytes = e.file_bytes;
      out.last_used_ms = e.last_used_ms;
      out.compiled_at_ms = e.compiled_at_ms;
    });
  });
}

}  // extern "C"
