// SPDX-License-Identifier: Apache-2.0
// AttentionLayerStack: the ready-made decode step (num_layers x cache write + attention) over
// persistent buffers, with the per-step upload that pads a batch for its graph.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "graphattn/capture.hpp"
#include "graphattn/error.hpp"
#include "runtime/driver.hpp"
#include "runtime/tensor_checks.hpp"

namespace graphattn {

using detail::driver;

namespace {

template <typename T>
void upload_async(const DeviceBuffer& dst, const std::vector<T>& src, size_t count, CUstream s) {
  if (count == 0) return;
  // Pageable source: the call returns once the data is staged, so src may change afterwards.
  GA_CU_CHECK(driver().cuMemcpyHtoDAsync(dst.ptr(), src.data(), count * sizeof(T), s));
}

}  // namespace

AttentionLayerStack::~AttentionLayerStack() = default;
AttentionLayerStack::AttentionLayerStack(AttentionLayerStack&&) noexcept = default;
AttentionLayerStack& AttentionLayerStack::operator=(AttentionLayerStack&&) noexcept = default;

AttentionLayerStack::AttentionLayerStack(Options options) : options_(std::move(options)) {
  Options& o = options_;
  o.mixed_branches = resolve_mixed_branches(o.mixed_branches);
  GA_REQUIRE(!o.layers.empty(), "AttentionLayerStack needs at least one layer");
  GA_REQUIRE(o.max_tokens >= 1, "max_tokens must be >= 1, got " + std::to_string(o.max_tokens));
  GA_REQUIRE(o.num_blocks >= 1, "num_blocks must be >= 1, got " + std::to_string(o.num_blocks));
  GA_REQUIRE(o.max_blocks_per_seq >= 1,
             "max_blocks_per_seq must be >= 1, got " + std::to_string(o.max_blocks_per_seq));
  GA_REQUIRE(o.kv_sharing_target.empty() || o.kv_sharing_target.size() == o.layers.size(),
             "kv_sharing_target has " + std::to_string(o.kv_sharing_target.size()) +
                 " entries; it must be empty or hold one per layer (" +
                 std::to_string(o.layers.size()) + ")");
  for (size_t l = 0; l < o.layers.size(); ++l) {
    const int t = o.kv_sharing_target.empty() ? -1 : o.kv_sharing_target[l];
    GA_REQUIRE(t == -1 || (t >= 0 && static_cast<size_t>(t) < l && o.kv_sharing_target[t] == -1),
               "kv_sharing_target[" + std::to_string(l) + "] = " + std::to_string(t) +
                   " is not allowed; allowed: -1 (its own cache) or an earlier layer (0.." +
                   std::to_string(static_cast<int>(l) - 1) + ") that has its own cache");
    kv_owner_.push_back(t == -1 ? static_cast<int>(l) : t);
  }
  const AttentionLayerConfig& first = o.layers[0];
  max_num_seqs_ = std::max(1, first.max_num_seqs);  // before the workspace bump below
  for (size_t l = 0; l < o.layers.size(); ++l) {
    AttentionLayerConfig& c = o.layers[l];
    GA_REQUIRE(c.num_heads == first.num_heads && c.num_kv_heads == first.num_kv_heads &&
                   c.head_size == first.head_size && c.block_size == first.block_size &&
                   c.dtype == first.dtype && c.kv_dtype == first.kv_dtype &&
                   c.layout == first.layout,
               "layer " + std::to_string(l) +
                   " differs from layer 0 in heads, head size, block "
                   "size, dtype or KV layout; the stack shares its buffers across layers");
    GA_REQUIRE(c.decode_query_len == first.decode_query_len,
               "layer " + std::to_string(l) + " has decode_query_len " +
                   std::to_string(c.decode_query_len) + " but layer 0 has " +
                   std::to_string(first.decode_query_len) +
                   "; a step's decode requests hold one query length for every layer");
    GA_REQUIRE(c.attn_type != AttentionType::kEncoderOnly,
               "layer " + std::to_string(l) +
                   " is encoder-only: it has no KV cache and no decode step to capture");
    // Padded decode batches reach max_tokens requests: the workspace must cover them.
    c.max_num_seqs = std::max(c.max_num_seqs, o.max_tokens);
    // Layer l's kernels follow layer l - 1's, which write only their own layer's cache and
    // output; the metadata is uploaded before the first layer. A layer that shares an earlier
    // layer's cache (maybe l - 1's, written by its kernel just before) waits instead.
    c.overlap_previous_kernel = kv_owner_[l] == static_cast<int>(l);
    // Layers share a backend when it would be the same one: the same derived kernels and the
    // same resolved configuration (the launch values a backend holds).
    auto candidate = std::make_unique<AttentionBackend>(c);
    int found = -1;
    for (size_t b = 0; b < backends_.size() && found < 0; ++b)
      if (backends_[b]->required_specs() == candidate->required_specs() &&
          backends_[b]->config() == candidate->config())
        found = static_cast<int>(b);
    if (found < 0) {
      candidate->set_mixed_branches(o.mixed_branches);
      backends_.push_back(std::move(candidate));
      found = static_cast<int>(backends_.size()) - 1;
    }
    backend_of_layer_.push_back(found);
  }
  const int64_t T = o.max_tokens, H = first.num_heads, KH = first.num_kv_heads, D = first.head_size,
                L = num_layers();
  query_ = DeviceBuffer(T * H * D * 2);
  key_ = DeviceBuffer(T * KH * D * 2);
  value_ = DeviceBuffer(T * KH * D * 2);
  outputs_ = DeviceBuffer(L * T * H * D * 2);
  slots_ = DeviceBuffer(T * 8);
  seq_lens_ = DeviceBuffer(T * 4);
  encoder_seq_lens_ = DeviceBuffer(T * 4);
  query_start_loc_ = DeviceBuffer((T + 1) * 4);
  block_table_ = DeviceBuffer(T * o.max_blocks_per_seq * 4);
  for (auto* b :
       {&query_, &key_, &value_, &outputs_, &seq_lens_, &encoder_seq_lens_, &block_table_})
    b->fill_bytes(0);
  slots_.fill_bytes(0xff);  // every slot -1: a step before the first batch writes nothing
  // Uniform decode requests of decode_query_len tokens until the tokens run out (what a capture
  // pass before the first set_batch reads).
  std::vector<int32_t> qsl(T + 1);
  for (int64_t i = 0; i <= T; ++i)
    qsl[i] = static_cast<int32_t>(std::min(i * first.decode_query_len, T));
  query_start_loc_.upload(qsl.data(), qsl.size() * 4);
  const int kv_elem = scalar_bytes(scalar_type_of(first.kv_dtype, first.dtype));
  const int64_t NB = o.num_blocks, B = first.block_size;
  for (int l = 0; l < L; ++l) {
    if (kv_owner_[l] != l) {  // a sharing layer reads its target's cache
      kv_.push_back(kv_[kv_owner_[l]]);
      continue;
    }
    own_kv_.emplace_back(2 * NB * B * KH * D * kv_elem);
    own_kv_.back().fill_bytes(0);
    void* p = own_kv_.back().data();
    kv_.push_back(first.layout == KvLayout::kNHD
                      ? TensorView::contiguous(p, scalar_type_of(first.kv_dtype, first.dtype),
                                               {2, NB, B, KH, D})
                      : TensorView::strided(p, scalar_type_of(first.kv_dtype, first.dtype),
                                            {2, NB, B, KH, D},
                                            {NB * KH * B * D, KH * B * D, D, B * D, 1}));
  }
}

bool AttentionLayerStack::has_cross_layer() const {
  for (const AttentionLayerConfig& c : options_.layers)
    if (c.attn_type == AttentionType::kEncoderDecoder) return true;
  return false;
}

void AttentionLayerStack::prepare(KernelCache& cache) {
  size_t ws = 0;
  for (auto& b : backends_) {
    b->prepare(cache);
    ws = std::max(ws, b->workspace_bytes());
  }
  if (workspace_.bytes() < ws) workspace_ = DeviceBuffer(ws);
}

void AttentionLayerStack::check_batch(const CommonAttentionMetadata& m, int padded) const {
  const int n = m.num_actual_tokens;
  GA_REQUIRE(padded >= n && padded <= options_.max_tokens,
             "padded token count " + std::to_string(padded) + " must lie in [" + std::to_string(n) +
                 ", max_tokens " + std::to_string(options_.max_tokens) + "]");
  GA_REQUIRE(m.max_blocks_per_seq <= options_.max_blocks_per_seq,
             "the batch's block table is " + std::to_string(m.max_blocks_per_seq) +
                 " blocks wide; the stack holds " + std::to_string(options_.max_blocks_per_seq));
}

void AttentionLayerStack::set_batch(const CommonAttentionMetadata& m, int padded, CUstream stream,
                                    const std::vector<uint16_t>* query,
                                    const std::vector<uint16_t>* key,
                                    const std::vector<uint16_t>* value) {
  const AttentionLayerConfig& c = options_.layers[0];
  const int n = m.num_actual_tokens;
  check_batch(m, padded);
  // Decodes hold up to q tokens each; a uniform decode batch (every request exactly q tokens)
  // is the one a graph serves, padded with requests of q tokens and seq_len 0.
  const int q = c.decode_query_len;
  const DecodePrefillSplit split = split_decodes_and_prefills(m, q);
  const bool uniform = split.num_prefills == 0 && int64_t{m.num_reqs} * q == n;
  GA_REQUIRE(uniform || padded == n,
             "only uniform decode batches (every request " + std::to_string(q) +
                 " token(s)) are padded for a decode graph; this batch runs eagerly with its own "
                 "token count " +
                 std::to_string(n) + ", not " + std::to_string(padded) +
                 " (or in a mixed graph: set_mixed_batch)");
  GA_REQUIRE(padded == n || padded % q == 0,
             "padded token count " + std::to_string(padded) +
                 " must be a multiple of decode_query_len " + std::to_string(q) +
                 " (a graph of n tokens serves n / decode_query_len requests)");
  const int R = uniform ? padded / q : m.num_reqs;
  upload_batch(m, padded, R, q, stream, query, key, value);
  counts_.num_reqs = R;
  counts_.num_decodes = uniform ? R : split.num_decodes;
  counts_.num_decode_tokens = uniform ? padded : split.num_decode_tokens;
  counts_.num_actual_tokens = padded;
  counts_.max_query_len = std::max(1, m.max_query_len);
  counts_.max_seq_len = m.max_seq_len;
  counts_tokens_ = padded;
}

int AttentionLayerStack::mixed_request_slots(int num_tokens) const {
  return std::max(1, std::min(num_tokens, max_num_seqs_));
}

void AttentionLayerStack::set_mixed_batch(const CommonAttentionMetadata& m, int padded,
                                          CUstream stream, const std::vector<uint16_t>* query,
                                          const std::vector<uint16_t>* key,
                                          const std::vector<uint16_t>* value) {
  check_batch(m, padded);
  split_decodes_and_prefills(m, options_.layers[0].decode_query_len);  // decodes first
  const int R = mixed_request_slots(padded);
  GA_REQUIRE(m.num_reqs <= R, "a mixed graph of " + std::to_string(padded) + " tokens holds " +
                                  std::to_string(R) + " requests (min(tokens, max_num_seqs " +
                                  std::to_string(max_num_seqs_) + ")); the batch has " +
                                  std::to_string(m.num_reqs));
  upload_batch(m, padded, R, 0, stream, query, key, value);
  counts_tokens_ = -1;  // step() of this size would read counts of another batch
}

void AttentionLayerStack::upload_batch(const CommonAttentionMetadata& m, int padded, int R,
                                       int pad_q, CUstream stream,
                                       const std::vector<uint16_t>* query,
                                       const std::vector<uint16_t>* key,
                                       const std::vector<uint16_t>* value) {
  const AttentionLayerConfig& c = options_.layers[0];
  const int n = m.num_actual_tokens;
  const int W = options_.max_blocks_per_seq;
  // Requests past the batch's hold pad_q tokens each (and seq_len 0).
  staged_ints_.assign(static_cast<size_t>(R + 1), 0);
  for (int r = 0; r <= R; ++r)
    staged_ints_[r] = r <= m.num_reqs ? m.query_start_loc[r] : n + (r - m.num_reqs) * pad_q;
  upload_async(query_start_loc_, staged_ints_, R + 1, stream);
  staged_ints_.assign(static_cast<size_t>(R), 0);  // padded requests: seq_len 0
  std::copy(m.seq_lens.begin(), m.seq_lens.end(), staged_ints_.begin());
  upload_async(seq_lens_, staged_ints_, R, stream);
  int max_encoder_len = 0;
  if (has_cross_layer()) {
    // Cross-attention layers read the encoder's keys: their lengths, padded requests 0.
    GA_REQUIRE(m.encoder_seq_lens.size() == static_cast<size_t>(m.num_reqs),
               "the stack has cross-attention layers: encoder_seq_lens needs one length for each "
               "of the " +
                   std::to_string(m.num_reqs) + " requests, got " +
                   std::to_string(m.encoder_seq_lens.size()));
    staged_ints_.assign(static_cast<size_t>(R), 0);
    std::copy(m.encoder_seq_lens.begin(), m.encoder_seq_lens.end(), staged_ints_.begin());
    for (int len : m.encoder_seq_lens) max_encoder_len = std::max(max_encoder_len, len);
    upload_async(encoder_seq_lens_, staged_ints_, R, stream);
  }
  staged_ints_.assign(static_cast<size_t>(m.num_reqs) * W, 0);
  for (int r = 0; r < m.num_reqs; ++r)
    std::copy(m.block_table.begin() + static_cast<size_t>(r) * m.max_blocks_per_seq,
              m.block_table.begin() + static_cast<size_t>(r + 1) * m.max_blocks_per_seq,
              staged_ints_.begin() + static_cast<size_t>(r) * W);
  upload_async(block_table_, staged_ints_, staged_ints_.size(), stream);
  staged_slots_.assign(static_cast<size_t>(padded), -1);
  std::copy(m.slot_mapping.begin(), m.slot_mapping.begin() + n, staged_slots_.begin());
  upload_async(slots_, staged_slots_, padded, stream);
  const size_t qrow = static_cast<size_t>(c.num_heads) * c.head_size;
  const size_t krow = static_cast<size_t>(c.num_kv_heads) * c.head_size;
  for (auto [src, dst, row, name] :
       {std::tuple{query, &query_, qrow, "query"}, std::tuple{key, &key_, krow, "key"},
        std::tuple{value, &value_, krow, "value"}}) {
    if (!src) continue;
    GA_REQUIRE(src->size() >= n * row, std::string(name) + " holds " + std::to_string(src->size()) +
                                           " elements; the batch needs " + std::to_string(n * row));
    upload_async(*dst, *src, n * row, stream);
  }
  counts_.max_encoder_len = max_encoder_len;
}

void AttentionLayerStack::step(CUstream stream, int num_tokens) {
  const AttentionLayerConfig& c = options_.layers[0];
  GA_REQUIRE(num_tokens >= 0 && num_tokens <= options_.max_tokens,
             "step of " + std::to_string(num_tokens) + " tokens; the stack holds at most " +
                 std::to_string(options_.max_tokens));
  const int qlen = c.decode_query_len;
  Counts k = counts_;
  if (num_tokens != counts_tokens_) {
    // A capture pass before (or apart from) set_batch: the graph of this size serves padded
    // uniform decode batches, so that is the shape it is captured with.
    GA_REQUIRE(num_tokens % qlen == 0, "a step of " + std::to_string(num_tokens) +
                                           " tokens is not a uniform decode batch of " +
                                           std::to_string(qlen) +
                                           " tokens a request; capture sizes must be multiples of "
                                           "decode_query_len");
    const int reqs = num_tokens / qlen;
    k = Counts{reqs, reqs, num_tokens, num_tokens, qlen, c.max_model_len, c.max_model_len};
  }
  run_layers(stream, num_tokens, k, false);
}

void AttentionLayerStack::step_mixed(CUstream stream, int num_tokens) {
  const AttentionLayerConfig& c = options_.layers[0];
  GA_REQUIRE(num_tokens >= 1 && num_tokens <= options_.max_tokens,
             "mixed step of " + std::to_string(num_tokens) + " tokens; the stack holds 1.." +
                 std::to_string(options_.max_tokens));
  // Nothing of one batch: the kernels split it on the device. Lengths are bounded by the model.
  const int reqs = mixed_request_slots(num_tokens);
  run_layers(stream, num_tokens,
             Counts{reqs, 0, 0, num_tokens, c.max_model_len, c.max_model_len, c.max_model_len},
             true);
}

void AttentionLayerStack::run_layers(CUstream stream, int num_tokens, const Counts& k,
                                     bool device_split) {
  const AttentionLayerConfig& c = options_.layers[0];
  const int64_t n = num_tokens, H = c.num_heads, KH = c.num_kv_heads, D = c.head_size;
  AttentionMetadata md;
  md.device_split = device_split;
  md.query_start_loc = TensorView::contiguous(query_start_loc_.data(), ScalarType::kInt32, {n + 1});
  md.seq_lens = TensorView::contiguous(seq_lens_.data(), ScalarType::kInt32, {k.num_reqs});
  md.block_table = TensorView::contiguous(block_table_.data(), ScalarType::kInt32,
                                          {k.num_reqs, options_.max_blocks_per_seq});
  md.slot_mapping = TensorView::contiguous(slots_.data(), ScalarType::kInt64, {n});
  md.num_reqs = k.num_reqs;
  md.num_decodes = k.num_decodes;
  md.num_decode_tokens = k.num_decode_tokens;
  md.num_actual_tokens = k.num_actual_tokens;
  md.max_query_len = k.max_query_len;
  md.max_seq_len = k.max_seq_len;
  md.query_start_loc.shape[0] = k.num_reqs + 1;
  const ScalarType st = scalar_type_of(c.dtype);
  const auto q = TensorView::contiguous(query_.data(), st, {n, H, D});
  const auto kk = TensorView::contiguous(key_.data(), st, {n, KH, D});
  const auto v = TensorView::contiguous(value_.data(), st, {n, KH, D});
  // Cross-attention layers: the encoder's lengths as seq_lens, and no write (the encoder's
  // keys and values are in their cache already; the step's tokens are the decoder's).
  AttentionMetadata cross_md = md;
  cross_md.seq_lens =
      TensorView::contiguous(encoder_seq_lens_.data(), ScalarType::kInt32, {k.num_reqs});
  cross_md.max_seq_len = k.max_encoder_len;
  for (int l = 0; l < num_layers(); ++l) {
    TensorView out = output(l);
    out.shape[0] = n;
    // A sharing layer and a cross-attention layer write nothing (ndim 0 views).
    const bool owner = kv_owner_[l] == l;
    const bool cross = options_.layers[l].attn_type == AttentionType::kEncoderDecoder;
    const bool writes = owner && !cross;
    // A mixed step: the backend's forward() forks the prefill after the write and joins it
    // before returning (MixedBranches), so every kernel of layer l + 1 waits for both of l's.
    backends_[backend_of_layer_[l]]->forward(
        q, writes ? kk : TensorView{}, writes ? v : TensorView{}, kv_[l], out,
        cross ? cross_md : md, workspace_.data(), workspace_.bytes(), stream);
  }
}

uint64_t AttentionLayerStack::fingerprint() const {
  std::vector<uint64_t> words;
  for (const DeviceBuffer* b :
       {&query_, &key_, &value_, &outputs_, &slots_, &seq_lens_, &encoder_seq_lens_,
        &query_start_loc_, &block_table_, &workspace_}) {
    words.push_back(b->ptr());
    words.push_back(b->bytes());
  }
  for (const TensorView& t : kv_) {
    words.push_back(reinterpret_cast<uint64_t>(t.data));
    for (int d = 0; d < t.ndim; ++d) words.push_back(static_cast<uint64_t>(t.strides[d]));
  }
  for (const auto& b : backends_) words.push_back(reinterpret_cast<uint64_t>(b.get()));
  return XXH3_64bits(words.data(), words.size() * sizeof(uint64_t));
}

void AttentionLayerStack::set_kv_cache(int layer, const TensorView& kv_cache) {
  GA_REQUIRE(
      layer >= 0 && layer < num_layers(),
      "layer " + std::to_string(layer) + " out of range [0, " + std::to_string(num_layers()) + ")");
  const TensorView& old = kv_[layer];
  bool same = kv_cache.ndim == old.ndim && kv_cache.dtype == old.dtype;
  for (int d = 0; same && d < old.ndim; ++d) same = kv_cache.shape[d] == old.shape[d];
  GA_REQUIRE(same, "layer " + std::to_string(layer) + " KV cache must be " + old.describe() +
                       ", got " + kv_cache.describe());
  GA_REQUIRE(kv_owner_[layer] == layer, "layer " + std::to_string(layer) + " shares layer " +
                                            std::to_string(kv_owner_[layer]) +
                                            "'s KV cache; set that layer's instead");
  for (int l = 0; l < num_layers(); ++l)
    if (kv_owner_[l] == layer) kv_[l] = kv_cache;
}

int AttentionLayerStack::kv_owner(int layer) const { return kv_owner_.at(layer); }

TensorView AttentionLayerStack::kv_cache(int layer) const { return kv_.at(layer); }

TensorView AttentionLayerStack::output(int layer) const {
  const AttentionLayerConfig& c = options_.layers[0];
  const int64_t T = options_.max_tokens, H = c.num_heads, D = c.head_size;
  char* base = static_cast<char*>(outputs_.data()) + static_cast<size_t>(layer) * T * H * D * 2;
  return TensorView::contiguous(base, scalar_type_of(c.dtype), {T, H, D});
}

size_t AttentionLayerStack::device_bytes() const {
  size_t total = 0;
  for (const DeviceBuffer* b : {&query_, &key_, &value_, &outputs_, &slots_, &seq_lens_,
                                &query_start_loc_, &block_table_, &workspace_})
    total += b->bytes();
  for (const auto& b : own_kv_) total += b.bytes();
  return total;
}

}  // namespace graphattn
