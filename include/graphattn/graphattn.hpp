// SPDX-License-Identifier: Apache-2.0
// graphattn: paged attention for LLM inference engines, JIT-compiled per specialization and
// launched inside CUDA graphs. This header includes the whole C++ API (the C ABI is
// graphattn/graphattn.h).
#pragma once

#include "graphattn/backend.hpp"
#include "graphattn/blocksparse.hpp"
#include "graphattn/capture.hpp"
#include "graphattn/cascade.hpp"
#include "graphattn/error.hpp"
#include "graphattn/jit.hpp"
#include "graphattn/kv_blocks.hpp"
#include "graphattn/log.hpp"
#include "graphattn/merge_states.hpp"
#include "graphattn/metadata.hpp"
#include "graphattn/paged_cache.hpp"
#include "graphattn/printable.hpp"
#include "graphattn/runtime.hpp"
#include "graphattn/spec.hpp"
#include "graphattn/tensor.hpp"
