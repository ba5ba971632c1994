// SPDX-License-Identifier: Apache-2.0
// graphattn-warmup's command line: the options, their parsing and every check that needs no GPU,
// so that a bad value stops the tool (exit 2, a message naming it) before any phase runs. Kept
// apart from the phases so that the fuzzer (tests/fuzz) drives the same code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/models.hpp"

namespace graphattn::tools {

struct WarmupSettings {
  std::string model = "llama-3-8b";
  int max_num_seqs = 64;
  int max_model_len = 4096;
  int block_size = 16;
  std::string dtype = "bf16";
  std::string kv_dtype = "auto";
  std::vector<int> capture_sizes;
  int spec_tokens = 0;  // speculative tokens a decode step verifies: requests of 1 + K tokens
  int steps = 300;
  int arch = 0;
  int device = 0;  // CUDA device ordinal (one warmup process per GPU); checked against the count
                   // once the GPU is opened
  unsigned threads = 0;
  std::string cache_dir;
  double kv_cache_gib = 0;  // 0: as much as the decode loop can use, within 50% of free memory
  uint64_t seed = 1234;
  bool list_models = false;
  // Steps that mix prefills with decodes replay mixed graphs (captured per token count, the
  // batch split on the device) instead of running eagerly; --no-mixed-graphs turns them off.
  bool mixed_graphs = true;
  // One JSON document of the results on stdout at the end; the progress lines go to stderr.
  bool json = false;
};

struct WarmupArgs {
  WarmupSettings settings;
  int exit_code = -1;  // -1: go on and run; otherwise exit with it (0 after --help)
  std::string text;    // the help or --version (exit 0), or the error message (exit 2)
};

// Parses argv[1..argc) and checks every value and the environment (GRAPHATTN_CACHE_*); prints
// nothing.
WarmupArgs parse_warmup_args(int argc, const char* const* argv);

// What the kernels are built for: the settings' block size, dtypes, lengths, decode query
// length (1 + spec_tokens) and `arch` (the resolved target).
ModelRunSettings run_settings_of(const WarmupSettings& s, int arch);

// "" when the settings are usable on some GPU; otherwise what is wrong, naming the value and what
// is allowed. The arch is checked against the device later (0: the GPU's own).
std::string warmup_settings_problem(const WarmupSettings& s);

}  // namespace graphattn::tools
