// SPDX-License-Identifier: Apache-2.0
// CUDA graph capture and replay of an engine's decode step (vLLM v1 semantics).
//
// Capture sizes default to [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16) with
// max = min(2 * max_num_seqs, 512). A step of n tokens runs the graph of the smallest size >= n
// (its buffers padded: slot_mapping -1, seq_lens 0); above the largest size it runs eagerly.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graphattn/backend.hpp"
#include "graphattn/export.h"
#include "graphattn/metadata.hpp"
#include "graphattn/runtime.hpp"

namespace graphattn {

// decode_query_len > 1 (uniform multi-token decode graphs, vLLM's speculative decoding): the
// list is made for max = min(2 * max_num_seqs * decode_query_len, 512) and every size rounded up
// to a multiple of decode_query_len (a graph of n tokens serves n / decode_query_len requests),
// duplicates and sizes above max dropped, as vLLM adjusts its sizes for speculative decoding.
GRAPHATTN_API std::vector<int> default_capture_sizes(int max_num_seqs, int decode_query_len = 1);
// Sorts, removes duplicates, and rejects sizes < 1 (graphattn::Error naming the value).
GRAPHATTN_API std::vector<int> normalize_capture_sizes(std::vector<int> sizes);
// The smallest size >= n, or 0 when n is above every size (run eagerly, unpadded).
GRAPHATTN_API int padded_capture_size(const std::vector<int>& sorted_sizes, int n);

struct GRAPHATTN_API GraphStats {
  uint64_t captures = 0;           // graphs captured (first captures and re-captures)
  uint64_t replays = 0;            // steps served by cuGraphLaunch
  uint64_t updates = 0;            // graphs refreshed in place by cuGraphExecUpdate
  uint64_t reinstantiations = 0;   // updates the driver refused: instantiated anew
  uint64_t eager_steps = 0;        // steps above the largest size, or with graphs disabled
  double capture_ms = 0;           // host time spent capturing and instantiating
  int64_t graph_memory_bytes = 0;  // device memory the instantiated graphs took (cuMemGetInfo)
};

// Replays one captured graph per size. The engine supplies the step: a callable that launches
// all of one step's work for `num_tokens` (padded) tokens on `stream`, reading the engine's
// persistent buffers, and a fingerprint of everything the captured launches depend on (buffer
// pointers, sizes, kernel handles). Same fingerprint: replay. Different: capture again and
// cuGraphExecUpdate the existing graph, instantiating anew if the driver refuses.
class GRAPHATTN_API GraphRunner {
 public:
  using Step = std::function<void(CUstream stream, int num_tokens)>;
  using Fingerprint = std::function<uint64_t()>;
  using Progress = std::function<void(int index, int count, int size, double ms)>;

  struct Options {
    std::vector<int> capture_sizes;  // empty: default_capture_sizes(max_num_seqs)
    int max_num_seqs = 256;
    bool disable_graphs = false;  // also GRAPHATTN_DISABLE_GRAPHS=1
    // Instantiate with CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY: each kernel node runs at
    // the priority of the stream it was captured from (AttentionLayerStack's high-priority
    // mixed branch), not at the priority of the stream the graph is launched into.
    bool use_node_priority = false;
  };

  GraphRunner(Options options, Step step, Fingerprint fingerprint);
  ~GraphRunner();
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  // The warmup capture pass: for every size, largest first, one eager run then a capture.
  // Every kernel must already be compiled and loaded (the step may not compile or allocate).
  void capture_all(CUstream stream, const Progress& progress = nullptr);

  // Runs one step of n real tokens (the engine has already padded its buffers to
  // padded_size(n)). allow_graph false (a batch the metadata builder says cannot run in a
  // graph, e.g. one with prefills) runs eagerly. Returns the size that ran (0: eager).
  int run(CUstream stream, int num_tokens, bool allow_graph = true);

  int padded_size(int num_tokens) const;
  const std::vector<int>& capture_sizes() const { return sizes_; }
  bool graphs_enabled() const { return !disabled_; }
  GraphStats stats() const { return stats_; }

 private:
  struct Graph;
  void capture(CUstream stream, int size, Graph& g);
  std::vector<int> sizes_;
  bool disabled_;
  bool use_node_priority_;
  Step step_;
  Fingerprint fingerprint_;
  std::map<int, std::unique_ptr<Graph>> graphs_;
  GraphStats stats_;
};

// The library's ready step: num_layers x (cache write + attention) over persistent device
// buffers sized for the largest batch, so one captured graph per size serves every step.
// Each step the engine (or graphattn-warmup) uploads the batch with set_batch(), which pads it
// for the graph that will run: slot_mapping tail -1, seq_lens tail 0, query_start_loc
// non-decreasing (each padded request holds one padded token).
//
// Speculative decoding (vLLM's uniform batch): layers with decode_query_len q > 1 (the same in
// every layer) take decode requests of 1..q tokens. A graph of n tokens (a multiple of q; see
// default_capture_sizes(max_num_seqs, q)) serves a uniform decode batch, every request exactly q
// tokens, padded with requests of q tokens and seq_len 0; any other batch runs eagerly.
//
// Cross-attention layers (attn_type kEncoderDecoder) read a cache that the step does not write:
// the encoder's keys and values, put there by the engine (an earlier forward() with key and
// value, or its own copy into kv_cache(l) / set_kv_cache), through the same block table as the
// other layers, for CommonAttentionMetadata::encoder_seq_lens keys per request (set_batch
// uploads them; padded requests 0). Their step writes nothing. Encoder-only layers have no
// decode step and are refused.
class GRAPHATTN_API AttentionLayerStack {
 public:
  // How step_mixed (and every step with a mixed batch) runs one layer's decode and prefill:
  // the stack sets it on each of its backends (AttentionBackend::set_mixed_branches; the enum
  // and its measurements are in backend.hpp), whose forward() forks after the cache write and
  // joins before returning, so every kernel of layer l + 1 waits for both of layer l's.
  using MixedBranches = graphattn::MixedBranches;
  // The mode's name as GRAPHATTN_MIXED_BRANCHES spells it.
  static const char* mixed_branches_name(MixedBranches mode) {
    return graphattn::mixed_branches_name(mode);
  }

  struct Options {
    std::vector<AttentionLayerConfig> layers;  // one per layer (windows may alternate)
    int max_tokens = 0;          // largest batch in tokens (the largest capture size, or more)
    int num_blocks = 0;          // KV cache blocks per layer
    int max_blocks_per_seq = 0;  // block-table width: ceil(max_model_len / block_size)
    // KV sharing (vLLM's kv_sharing_target_layer_name): empty, or one entry per layer: -1 for a
    // layer with its own cache, else the index of an earlier layer with its own cache whose
    // cache this layer reads. A sharing layer writes no keys or values and has no cache of its
    // own; set_kv_cache() of its target moves it too.
    std::vector<int> kv_sharing_target;
    // The mixed-batch decode/prefill launch layout of every layer (kDefault resolved at
    // construction; a branch mode's backends make their prefill stream and two events at their
    // first mixed forward() from a stream). A graph of a high-priority mode keeps its priority
    // only with GraphRunner::Options::use_node_priority.
    MixedBranches mixed_branches = MixedBranches::kDefault;
  };
  explicit AttentionLayerStack(Options options);
  ~AttentionLayerStack();
  AttentionLayerStack(AttentionLayerStack&&) noexcept;
  AttentionLayerStack& operator=(AttentionLayerStack&&) noexcept;

  // Compiles and loads every layer's kernels (through `cache`); call before capture.
  void prepare(KernelCache& cache = default_kernel_cache());

  // Uploads one step's batch (decodes first) on `stream` and pads it to `padded_tokens`
  // (>= m.num_actual_tokens; pass the graph size that will run, or the actual count). Only a
  // uniform decode batch may be padded, and only to a multiple of decode_query_len.
  // query/key/value rows of the real tokens are uploaded from the host when given.
  void set_batch(const CommonAttentionMetadata& m, int padded_tokens, CUstream stream,
                 const std::vector<uint16_t>* query = nullptr,
                 const std::vector<uint16_t>* key = nullptr,
                 const std::vector<uint16_t>* value = nullptr);

  // The step: every layer's forward for `num_tokens` tokens (the padded count set_batch used).
  void step(CUstream stream, int num_tokens);

  // Mixed graphs (FlashAttentionMetadataBuilder's mixed_graphs, vLLM's full graphs of any
  // batch): set_mixed_batch uploads any batch with its decodes first, padded to `padded_tokens`
  // tokens and mixed_request_slots(padded_tokens) requests (the padded ones hold no token and
  // seq_len 0), and step_mixed runs every layer with AttentionMetadata::device_split, so one
  // graph captured per token count serves every mix of decodes and prefills up to that size.
  // Outputs of padded tokens are not written.
  void set_mixed_batch(const CommonAttentionMetadata& m, int padded_tokens, CUstream stream,
                       const std::vector<uint16_t>* query = nullptr,
                       const std::vector<uint16_t>* key = nullptr,
                       const std::vector<uint16_t>* value = nullptr);
  void step_mixed(CUstream stream, int num_tokens);
  // Request slots of a mixed step of num_tokens tokens: min(num_tokens, max_num_seqs of layer 0).
  int mixed_request_slots(int num_tokens) const;
  // Pointers, sizes and kernel handles the captured launches depend on.
  uint64_t fingerprint() const;

  // Replaces layer l's KV cache with an engine-owned view (same shape and dtype), for the layers
  // that share it too. Refused for a sharing layer (set its target's).
  void set_kv_cache(int layer, const TensorView& kv_cache);
  // The layer whose cache layer l reads: l itself, or its KV sharing target.
  int kv_owner(int layer) const;
  TensorView kv_cache(int layer) const;
  TensorView output(int layer) const;  // [max_tokens, num_heads, head_size]
  int num_layers() const { return static_cast<int>(options_.layers.size()); }
  // Query tokens of a uniform decode request (every layer's decode_query_len).
  int decode_query_len() const { return options_.layers[0].decode_query_len; }
  const Options& options() const { return options_; }
  size_t device_bytes() const;  // what the stack allocated

 private:
  struct Counts {
    int num_reqs = 0, num_decodes = 0, num_decode_tokens = 0, num_actual_tokens = 0,
        max_query_len = 1, max_seq_len = 0, max_encoder_len = 0;
  };
  bool has_cross_layer() const;
  void check_batch(const CommonAttentionMetadata& m, int padded) const;
  // Uploads the batch padded to `padded` tokens and R requests of pad_q tokens each.
  void upload_batch(const CommonAttentionMetadata& m, int padded, int R, int pad_q, CUstream stream,
                    const std::vector<uint16_t>* query, const std::vector<uint16_t>* key,
                    const std::vector<uint16_t>* value);
  void run_layers(CUstream stream, int num_tokens, const Counts& counts, bool device_split);
  Options options_;
  int max_num_seqs_ = 1;  // layer 0's max_num_seqs as given (mixed steps' request slots)
  std::vector<std::unique_ptr<AttentionBackend>> backends_;  // one per distinct configuration
  std::vector<int> backend_of_layer_;
  std::vector<int> kv_owner_;  // per layer: the layer whose cache it reads (itself, or a target)
  DeviceBuffer query_, key_, value_, outputs_, slots_, seq_lens_, encoder_seq_lens_,
      query_start_loc_, block_table_, workspace_;
  std::vector<DeviceBuffer> own_kv_;
  std::vector<TensorView> kv_;
  std::vector<int64_t> staged_slots_;
  std::vector<int32_t> staged_ints_;
  Counts counts_;
  int counts_tokens_ = 0;  // the padded token count counts_ were set for
};

}  // namespace graphattn
