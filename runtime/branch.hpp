// SPDX-License-Identifier: Apache-2.0
// Internal: AttentionLayerStack's mixed-step branches. While a PrefillBranchScope lives, an
// AttentionBackend::forward() on the same thread that launches both a decode and a prefill
// runs the prefill on `stream` instead of forward()'s stream: after the cache write (and the
// split counters' clear) it records `fork` on forward()'s stream and makes `stream` wait for
// it, so both kernels follow the write and neither waits for the other (in a capture: two
// graph branches). The caller joins `stream` back (forked says whether it must). A null
// `stream` keeps both on forward()'s stream, in the order prefill_first says.
#pragma once

#include <cuda.h>

namespace graphattn::detail {

struct PrefillBranch {
  CUstream stream = nullptr;  // null: forward()'s stream
  CUevent fork = nullptr;
  bool prefill_first = false;  // launch the prefill before the decode
  bool forked = false;         // set by forward(): the prefill ran on `stream`
};

// The calling thread's branch, or null (forward() launches everything on its stream).
PrefillBranch* current_prefill_branch();

class PrefillBranchScope {
 public:
  explicit PrefillBranchScope(PrefillBranch* b);
  ~PrefillBranchScope();
  PrefillBranchScope(const PrefillBranchScope&) = delete;
  PrefillBranchScope& operator=(const PrefillBranchScope&) = delete;

 private:
  PrefillBranch* previous_;
};

}  // namespace graphattn::detail
