// SPDX-License-Identifier: Apache-2.0
#include "tools/warmup_options.hpp"

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "graphattn/backend.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/log.hpp"
#include "graphattn/printable.hpp"
#include "graphattn/runtime.hpp"
#include "tools/models.hpp"
#include "tools/version.hpp"

namespace graphattn::tools {
namespace {

using graphattn::printable;

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
  return out;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool contains(const std::vector<int>& v, int x) {
  for (int y : v)
    if (y == x) return true;
  return false;
}

// A path given for the cache must be a directory or not exist yet.
std::string cache_dir_problem(const std::string& what, const std::string& dir) {
  struct stat st {};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0) return "";
  if (S_ISDIR(st.st_mode)) return "";
  return what + " '" + printable(dir, 4096) + "' is not a directory";
}

}  // namespace

ModelRunSettings run_settings_of(const WarmupSettings& s, int arch) {
  ModelRunSettings rs;
  rs.block_size = s.block_size;
  rs.dtype = dtype_from_name(s.dtype);
  rs.kv_dtype = kv_dtype_from_name(s.kv_dtype);
  rs.max_model_len = s.max_model_len;
  rs.max_num_seqs = s.max_num_seqs;
  rs.arch = arch;
  rs.decode_query_len = s.spec_tokens + 1;
  return rs;
}

std::string warmup_settings_problem(const WarmupSettings& s) {
  try {
    find_model(s.model);
  } catch (const std::exception& e) {
    return e.what();
  }
  if (!contains(supported_block_sizes(), s.block_size))
    return "--block-size " + std::to_string(s.block_size) +
           " is not supported; supported: 16, 32, ..., 256 (multiples of 16)";
  if (s.arch != 0 && !contains(supported_archs(), s.arch))
    return "--arch " + std::to_string(s.arch) + " is not supported; supported: 0 (the GPU's), " +
           join(supported_archs());
  if (s.device < 0)
    return "--device " + std::to_string(s.device) +
           " is not allowed; use a CUDA device ordinal 0..N-1 (N devices on this machine)";
  if (s.spec_tokens < 0 || s.spec_tokens > kMaxDecodeQueryLen - 1)
    return "--spec-tokens " + std::to_string(s.spec_tokens) + " is not allowed; use 0.." +
           std::to_string(kMaxDecodeQueryLen - 1) + " (a decode request holds 1 + K tokens)";
  for (int c : s.capture_sizes) {
    if (c < 1 || c > 65536)
      return "--capture-sizes " + std::to_string(c) + " is not allowed; sizes are 1..65536";
    if (c % (s.spec_tokens + 1) != 0)
      return "--capture-sizes " + std::to_string(c) + " is not allowed with --spec-tokens " +
             std::to_string(s.spec_tokens) + "; sizes are multiples of " +
             std::to_string(s.spec_tokens + 1) + " (a graph serves requests of 1 + K tokens)";
  }
  if (!std::isfinite(s.kv_cache_gib) || s.kv_cache_gib < 0 || s.kv_cache_gib > 1 << 20)
    return "--kv-cache-gib " + number_text(s.kv_cache_gib) +
           " is not allowed; use 0 (automatic) or a size in GiB up to 1048576";
  if (std::string p = cache_dir_problem("--cache-dir", s.cache_dir); !p.empty()) return p;
  try {
    check_cache_environment();
    check_flag_environment();
  } catch (const std::exception& e) {
    return e.what();
  }
  if (std::string p = log_level_problem(); !p.empty()) return p;
  if (s.cache_dir.empty())
    if (std::string p = cache_dir_problem("GRAPHATTN_CACHE_DIR", default_cache_dir()); !p.empty())
      return p;
  try {
    // Any supported arch stands in for the GPU's.
    const ModelRunSettings rs = run_settings_of(s, s.arch == 0 ? 90 : s.arch);
    for (const auto& layer : model_layer_configs(find_model(s.model), rs)) {
      const std::string p = attention_config_problem(layer);
      if (!p.empty()) return "model " + s.model + ": " + p;
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

WarmupArgs parse_warmup_args(int argc, const char* const* argv) {
  WarmupArgs out;
  WarmupSettings& s = out.settings;
  CLI::App app{"graphattn-warmup: compile, capture and run decode steps of a built-in model"};
  std::string seed = std::to_string(s.seed);
  app.add_option("--model", s.model, "built-in model configuration (--list-models)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", s.max_num_seqs, "most requests in one batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 512));
  app.add_option("--max-model-len", s.max_model_len, "longest sequence in tokens")
      ->capture_default_str()
      ->check(CLI::Range(64, 1 << 20));
  app.add_option("--block-size", s.block_size, "KV cache block size (16..256, multiples of 16)")
      ->capture_default_str();
  app.add_option("--dtype", s.dtype, "fp16 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp16", "bf16"}));
  app.add_option("--kv-cache-dtype", s.kv_dtype, "auto, e4m3 or e5m2")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "e4m3", "e5m2"}));
  app.add_option("--capture-sizes", s.capture_sizes,
                 "graph sizes in tokens, 1..65536, multiples of 1 + K (default: vLLM's list up to "
                 "max_num_seqs requests)");
  app.add_option("--spec-tokens", s.spec_tokens,
                 "speculative decoding: K draft tokens a decode step verifies (0..15); decode "
                 "requests hold 1 + K tokens and graphs capture uniform batches of them")
      ->capture_default_str();
  app.add_option("--steps", s.steps, "decode loop steps")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--arch", s.arch, "target arch, e.g. 90 (default: the GPU's, else 90)");
  app.add_option("--device", s.device,
                 "CUDA device ordinal to run on (one warmup process per GPU; default 0)")
      ->capture_default_str();
  app.add_option("--threads", s.threads, "compile threads (default: cores)")
      ->check(CLI::Range(0u, 1024u));
  app.add_option("--cache-dir", s.cache_dir,
                 "kernel cache directory (default: $GRAPHATTN_CACHE_DIR or ~/.cache/graphattn)");
  app.add_option("--kv-cache-gib", s.kv_cache_gib,
                 "KV cache size for all layers (default: up to half the free memory)");
  app.add_option("--seed", seed, "workload random seed (0..2^64-1)")->capture_default_str();
  app.add_flag("!--no-mixed-graphs", s.mixed_graphs,
               "run steps that mix prefills with decodes eagerly instead of replaying mixed "
               "graphs (captured per token count, the batch split on the device)");
  app.add_flag("--list-models", s.list_models, "print the built-in models and exit");
  app.add_flag("--json", s.json,
               "print one JSON document of the results on stdout at the end; the lines for "
               "people go to stderr");
  app.set_version_flag("--version", version_text("graphattn-warmup"),
                       "print the tool's, the library's and NVRTC's versions and exit");
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.emplace_back(argv[i]);  // CLI11 takes them reversed
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    out.exit_code = 0;
    out.text = app.help();
    return out;
  } catch (const CLI::CallForVersion& e) {
    out.exit_code = 0;
    out.text = std::string(e.what()) + "\n";
    return out;
  } catch (const CLI::ParseError& e) {
    out.exit_code = 2;
    out.text = printable(e.what(), 400);
    return out;
  }
  // The seed is read here: CLI11 would take "-1" for an unsigned option.
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(seed.c_str(), &end, 10);
  if (seed.empty() || seed[0] < '0' || seed[0] > '9' || *end != '\0' || errno == ERANGE) {
    out.exit_code = 2;
    out.text = "--seed '" + printable(seed) + "' is not allowed; use a number 0..2^64-1";
    return out;
  }
  s.seed = v;
  if (s.list_models) return out;
  const std::string problem = warmup_settings_problem(s);
  if (!problem.empty()) {
    out.exit_code = 2;
    out.text = problem;
  }
  return out;
}

}  // namespace graphattn::tools
