// SPDX-License-Identifier: Apache-2.0
// graphattn-cache compile: fills the cache ahead of time through the library's KernelCache, so
// that entries, keys and names are exactly those an engine looks up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/log.hpp"
#include "graphattn/spec.hpp"
#include "tools/cache/cache_tool.hpp"
#include "tools/models.hpp"
#include "tools/progress.hpp"

namespace graphattn::tools::cache_tool {

std::vector<graphattn::AttentionSpec> requested_specs(const Options& o) {
  std::vector<graphattn::AttentionSpec> specs;
  std::string bad;
  for (const auto& text : o.specs) {
    try {
      specs.push_back(graphattn::AttentionSpec::parse(text));
    } catch (const std::exception& ex) {
      bad +=
          std::string(bad.empty() ? "" : "\n") + "--spec '" + printable(text) + "': " + ex.what();
    }
  }
  for (const auto& name : o.models) {
    for (const int arch : o.archs) {
      try {
        graphattn::tools::ModelRunSettings rs;
        rs.block_size = o.block_size;
        rs.dtype = graphattn::tools::dtype_from_name(o.dtype);
        rs.kv_dtype = graphattn::tools::kv_dtype_from_name(o.kv_dtype);
        rs.arch = arch;
        const auto layers =
            graphattn::tools::model_layer_configs(graphattn::tools::find_model(name), rs);
        for (const auto& spec : graphattn::tools::model_kernel_specs(layers))
          if (std::find(specs.begin(), specs.end(), spec) == specs.end()) specs.push_back(spec);
      } catch (const std::exception& ex) {
        bad += std::string(bad.empty() ? "" : "\n") + "--model '" + printable(name) + "' (arch " +
               std::to_string(arch) + "): " + ex.what();
      }
    }
  }
  if (!bad.empty()) throw UsageError(bad);
  return specs;
}

ToolCache::ToolCache(const Options& o) : o_(o) {
  require_directory_path(o.dir);
  graphattn::CacheOptions opts;
  opts.dir = o.dir;
  opts.dump_source = o.dump_source;
  opts.remote_url = o.remote;
  opts.signing_key_file = o.signing_key_file;
  opts.warn = [this](const std::string& w) {
    std::lock_guard<std::mutex> lock(mu_);
    warnings.push_back(w);
  };
  cache = std::make_unique<graphattn::KernelCache>(opts);
  if (!cache->disk_enabled()) throw disk_failure();
}

graphattn::Error ToolCache::disk_failure() const {
  std::string msg = "the cache directory " + printable(o_.dir, 4096) + " cannot be used";
  for (const auto& w : warnings) msg += "\n  " + w;
  return graphattn::Error(msg);
}

unsigned ToolCache::threads() const {
  return o_.threads ? o_.threads : std::max(1u, std::thread::hardware_concurrency());
}

std::vector<graphattn::PrecompileResult> ToolCache::precompile(
    const std::vector<graphattn::AttentionSpec>& specs, double* wall_ms,
    const graphattn::KernelCache::PrecompileDone& on_done) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<graphattn::PrecompileResult> results = cache->precompile(specs, threads(), on_done);
  *wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // A full disk fails the writes of what was compiled then: those kernels are not in the cache.
  if (!cache->disk_enabled() || cache->stats().write_failures > 0) throw disk_failure();
  return results;
}

int cmd_compile(const Options& o) {
  const std::vector<graphattn::AttentionSpec> specs = requested_specs(o);
  if (specs.empty()) throw UsageError("compile needs at least one --spec or --model");
  ToolCache tool(o);
  graphattn::KernelCache& cache = *tool.cache;
  auto word = [](const graphattn::PrecompileResult& r) {
    if (!r.error.empty()) return "failed";
    if (r.origin == graphattn::CacheOrigin::kRemote) return "remote";
    return r.origin == graphattn::CacheOrigin::kCompiled ? "compiled" : "hit";
  };
  // Each kernel's line is printed (and flushed) when that kernel is done; a terminal also gets
  // a status line while the others compile.
  size_t width = 0;
  for (const auto& s : specs) width = std::max(width, s.to_string().size());
  graphattn::tools::Progress progress("[compile]", specs.size(), stdout);
  auto on_done = [&](size_t, const graphattn::PrecompileResult& r) {
    progress.advance(r.spec);
    if (o.json) return;
    char ms[32];
    std::snprintf(ms, sizeof ms, "%10.1f ms", r.ms);
    progress.line(r.spec + std::string(width - std::min(width, r.spec.size()) + 2, ' ') + word(r) +
                  std::string(8 - std::strlen(word(r)) + 2, ' ') + ms);
  };
  double wall_ms = 0;
  const std::vector<graphattn::PrecompileResult> results =
      tool.precompile(specs, &wall_ms, on_done);
  progress.finish();
  const unsigned threads = tool.threads();

  size_t compiled = 0, hits = 0, remote_hits = 0, failed = 0;
  for (const auto& r : results) {
    if (!r.error.empty())
      ++failed;
    else if (r.origin == graphattn::CacheOrigin::kCompiled)
      ++compiled;
    else if (r.origin == graphattn::CacheOrigin::kRemote)
      ++remote_hits;
    else
      ++hits;
  }
  if (o.json) {
    Json list = Json::array();
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      Json j = {{"spec", r.spec.empty() ? specs[i].to_string() : r.spec},
                {"result", word(r)},
                {"ms", r.ms}};
      if (!r.error.empty()) j["error"] = r.error;
      list.push_back(j);
    }
    print_json({{"dir", cache.dir()},
                {"threads", threads},
                {"results", list},
                {"compiled", compiled},
                {"hits", hits},
                {"remote_hits", remote_hits},
                {"remote", cache.remote().empty() ? Json() : Json(cache.remote())},
                {"failed", failed},
                {"wall_ms", wall_ms}});
  } else {
    std::cout << "total: " << compiled << " compiled, " << hits << " hit, "
              << (cache.remote().empty()
                      ? std::string()
                      : std::to_string(remote_hits) + " from " + cache.remote() + ", ")
              << failed << " failed in " << fixed(wall_ms, 1) << " ms on "
              << plural(threads, "thread", "threads") << " into " << cache.dir() << "\n";
  }
  for (const auto& r : results)
    if (!r.error.empty())
      std::cerr << "graphattn-cache: " << r.spec << " failed: " << r.error << "\n";
  // What the cache warned about and did not stop the run (a remote server that went down).
  if (graphattn::log_enabled(graphattn::LogLevel::kWarning))
    for (const auto& w : tool.warnings) std::cerr << w << "\n";
  return failed ? kExitFailed : kExitOk;
}

}  // namespace graphattn::tools::cache_tool
