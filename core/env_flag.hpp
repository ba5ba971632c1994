// SPDX-License-Identifier: Apache-2.0
// On/off environment variables (GRAPHATTN_DISABLE_GRAPHS, GRAPHATTN_DECODE_CLUSTERS,
// GRAPHATTN_DUMP_SOURCE, GRAPHATTN_CHECK_BOUNDS, GRAPHATTN_PREFILL_MMA_SYNC,
// GRAPHATTN_PREFILL_TMA, GRAPHATTN_MIXED_DSP_NO_ROOM), parsed strictly in one place: unset or empty
// is off (GRAPHATTN_PREFILL_TMA: on); 1, true, yes, on are on and 0, false, no, off are off (any
// letter case); anything else ("1abc", "2", " 1") throws graphattn::Error naming the variable, its
// value and what is allowed, so that a typo is never silently read as the opposite.
#pragma once

#include "graphattn/runtime.hpp"  // check_flag_environment(), public: every flag above parsed once

namespace graphattn::detail {

bool env_flag(const char* name);

// GRAPHATTN_DECODE_CLUSTER_SPLITS (a measurement switch, runtime/decode.cpp): unset or empty is 0
// (the split policy's own cluster size: runtime/decode.hpp kAutoClusterSplits for the auto
// policy's clusters); else an integer 2..16, the most splits a cluster launch takes; anything else
// throws graphattn::Error naming the value and what is allowed.
int decode_cluster_splits_from_env();

// GRAPHATTN_DECODE_RING_STAGES (a measurement switch, runtime/decode.cpp enqueue_decode): unset or
// empty is 0 (each launch's own depth); else 2..4, the ring depth of a launch whose own depth is
// deeper, which keeps its own depth's shared memory (so its resident blocks); anything else
// throws graphattn::Error as above.
int decode_ring_stages_from_env();

// GRAPHATTN_DECODE_EARLY_TRIGGER (a measurement switch, runtime/decode.cpp [policy: early
// trigger]): unset or empty is 0 (the policy: captured cluster launches); 1 no launch, 2 every
// captured launch with the early prologue, 3 every launch with it (eager too); anything else
// throws graphattn::Error as above.
int decode_early_trigger_from_env();
// GRAPHATTN_MIXED_DSP_SM_BLOCKS (a measurement switch, runtime/attention.cpp mixed_decode_grid):
// unset or empty is 0 (one block a multiprocessor); else 1..4, the blocks a multiprocessor the
// _dsp kernel's split count plans for (its multiprocessor count times N, for the grid's size and
// the kernel's count); anything else throws graphattn::Error as above.
int mixed_dsp_sm_blocks_from_env();
// GRAPHATTN_MIXED_DSP_LONG_TILES: 1..64, the tiles a warp every leading decode must keep for the
// _dsp_long kernel's count to plan two blocks a multiprocessor (runtime/mixed_grid.hpp); unset or
// empty is kMixedDspLongTilesDefault (8: on an H100 every mix of the bench's mixed part is then
// ahead of the eager host split, docs/mixed-step-h100-2026-11-28-s15.txt); 0 turns the _dsp_long
// kernel off (one block a multiprocessor, as before session 15); anything else throws
// graphattn::Error as above.
constexpr int kMixedDspLongTilesDefault = 8;
int mixed_dsp_long_tiles_from_env();
// GRAPHATTN_DECODE_ITEMS (a measurement switch, runtime/decode.cpp enqueue_decode, with the
// decode kernel compiled with -DGA_DECODE_ITEMS=1..4 in GRAPHATTN_NVRTC_EXTRA_OPTIONS; else
// ignored): unset or empty is 0 (one request a block); else 1..64, the requests each block of an
// unsplit launch serves back to back (1: as many as make one round of blocks over the device's
// resident slots; with 3|4, the claimed items, as many blocks as the device holds at once);
// anything else throws graphattn::Error as above.
int decode_items_from_env();

}  // namespace graphattn::detail
