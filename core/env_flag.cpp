// SPDX-License-Identifier: Apache-2.0
#include "core/env_flag.hpp"

#include <cctype>
#include <cstdlib>
#include <string>

#include "core/nvrtc_options.hpp"
#include "core/text.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"

namespace graphattn::detail {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  std::string lower;
  for (const char* p = v; *p && lower.size() < 8; ++p)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  const std::string text = v;
  if (text.size() <= 5) {
    for (const char* on : {"1", "true", "yes", "on"})
      if (lower == on) return true;
    for (const char* off : {"0", "false", "no", "off"})
      if (lower == off) return false;
  }
  throw Error(std::string(name) + "='" + printable(text) +
              "' is not supported; supported: 1, true, yes or on; 0, false, no or off (or unset)");
}

namespace {

// name's value: unset or empty 0; else an integer lo..hi (lo >= 1, hi <= 99); anything else
// throws graphattn::Error naming the value and what is allowed.
int small_int_from_env(const char* name, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  const std::string text = v;
  const bool digits = text.size() <= 2 && std::isdigit(static_cast<unsigned char>(text[0])) &&
                      (text.size() == 1 || std::isdigit(static_cast<unsigned char>(text[1])));
  const int n = digits ? std::stoi(text) : 0;
  if (!digits || n < lo || n > hi || std::to_string(n) != text)
    throw Error(std::string(name) + "='" + printable(text) +
                "' is not supported; supported: an integer " + std::to_string(lo) + ".." +
                std::to_string(hi) + " (or unset)");
  return n;
}

}  // namespace

int decode_cluster_splits_from_env() {
  return small_int_from_env("GRAPHATTN_DECODE_CLUSTER_SPLITS", 2, 16);
}

int decode_ring_stages_from_env() {
  return small_int_from_env("GRAPHATTN_DECODE_RING_STAGES", 2, 4);
}

int decode_early_trigger_from_env() {
  return small_int_from_env("GRAPHATTN_DECODE_EARLY_TRIGGER", 1, 3);
}

int mixed_dsp_sm_blocks_from_env() {
  return small_int_from_env("GRAPHATTN_MIXED_DSP_SM_BLOCKS", 1, 4);
}

int mixed_dsp_long_tiles_from_env() {
  const char* v = std::getenv("GRAPHATTN_MIXED_DSP_LONG_TILES");
  if (!v || !*v) return kMixedDspLongTilesDefault;
  return small_int_from_env("GRAPHATTN_MIXED_DSP_LONG_TILES", 0, 64);
}
int decode_items_from_env() { return small_int_from_env("GRAPHATTN_DECODE_ITEMS", 1, 64); }

}  // namespace graphattn::detail

void graphattn::check_flag_environment() {
  for (const char* name :
       {"GRAPHATTN_DISABLE_GRAPHS", "GRAPHATTN_DECODE_CLUSTERS", "GRAPHATTN_DUMP_SOURCE",
        "GRAPHATTN_CHECK_BOUNDS", "GRAPHATTN_PREFILL_MMA_SYNC", "GRAPHATTN_PREFILL_TMA",
        "GRAPHATTN_MIXED_DSP_NO_ROOM"})
    detail::env_flag(name);
  detail::decode_cluster_splits_from_env();
  detail::decode_ring_stages_from_env();
  detail::decode_early_trigger_from_env();
  detail::mixed_dsp_sm_blocks_from_env();
  detail::mixed_dsp_long_tiles_from_env();
  detail::decode_items_from_env();
  detail::nvrtc_extra_options();
  resolve_mixed_branches(MixedBranches::kDefault);
  mixed_decode_divisor_from_env();
}
