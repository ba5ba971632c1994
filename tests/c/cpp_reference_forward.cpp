// SPDX-License-Identifier: Apache-2.0
// The C GPU test's C++ side (tests/c/cpp_reference.h): the C++ API's forward and cache write on
// views built here from raw pointers, and the driver calls C cannot make.
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <string>

#include "graphattn/backend.hpp"
#include "graphattn/paged_cache.hpp"
#include "graphattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "tests/c/cpp_reference.h"

using namespace graphattn;
using detail::driver;

namespace {

template <typename Body>
int run(const char* what, Body&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", what, e.what());
    return 1;
  }
}

CUdeviceptr dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

// The C side's allocations, by address.
std::map<void*, DeviceBuffer>& buffers() {
  static std::map<void*, DeviceBuffer> all;
  return all;
}

// cuMemcpyHtoD from pageable memory and cuMemsetD8 may return before the device is done, and
// work on a non-blocking stream does not wait for them: every copy and fill here ends with this.
void finish() { GA_CU_CHECK(driver().cuCtxSynchronize()); }
CUstream stream_of(void* s) { return static_cast<CUstream>(s); }

ScalarType model_type(const ref_layer_t& l) {
  return l.bf16 ? ScalarType::kBFloat16 : ScalarType::kFloat16;
}

KvDType kv_dtype(const ref_layer_t& l) {
  return l.kv_fp8 == 1 ? KvDType::kFp8E4M3 : l.kv_fp8 == 2 ? KvDType::kFp8E5M2 : KvDType::kAuto;
}

// [2, num_blocks, block_size, num_kv_heads, head_size] over NHD or HND memory.
TensorView cache_view(const ref_layer_t& l, const ref_batch_t& b) {
  const ScalarType t = l.kv_fp8 == 1   ? ScalarType::kFloat8E4M3
                       : l.kv_fp8 == 2 ? ScalarType::kFloat8E5M2
                                       : model_type(l);
  const int64_t NB = b.num_blocks, B = l.block_size, KH = l.num_kv_heads, D = l.head_size;
  if (!l.hnd) return TensorView::contiguous(b.kv_cache, t, {2, NB, B, KH, D});
  return TensorView::strided(b.kv_cache, t, {2, NB, B, KH, D},
                             {NB * KH * B * D, KH * B * D, D, B * D, 1});
}

TensorView rows(void* data, const ref_layer_t& l, int64_t tokens, int64_t heads) {
  return TensorView::contiguous(data, model_type(l), {tokens, heads, l.head_size});
}

// A kernel cache in the C side's directory (the same kernels, found on disk).
std::unique_ptr<KernelCache> cache_in(const char* dir) {
  CacheOptions options;
  options.dir = dir;
  return std::make_unique<KernelCache>(options);
}

TensorView slots_view(const ref_batch_t& b, int64_t tokens) {
  return TensorView::contiguous(b.slot_mapping, ScalarType::kInt64, {tokens});
}

// The batch's kv_cache as vLLM's legacy caches: one [2, num_blocks, block_size * num_kv_heads *
// head_size] allocation of the layer's kv dtype, split as split_paged_kv_cache does.
PagedKvCache legacy_caches_of(const ref_layer_t& l, const ref_batch_t& b) {
  const ScalarType t = l.kv_fp8 == 1   ? ScalarType::kFloat8E4M3
                       : l.kv_fp8 == 2 ? ScalarType::kFloat8E5M2
                                       : model_type(l);
  return split_paged_kv_cache(
      TensorView::contiguous(
          b.kv_cache, t, {2, b.num_blocks, int64_t{l.block_size} * l.num_kv_heads * l.head_size}),
      l.num_kv_heads, l.head_size);
}

}  // namespace

extern "C" {

int ref_alloc(size_t bytes, void** ptr) {
  return run("ref_alloc", [&] {
    *ptr = nullptr;
    DeviceBuffer buffer(bytes);
    finish();
    *ptr = buffer.data();
    buffers().emplace(*ptr, std::move(buffer));
  });
}

void ref_free(void* ptr) { buffers().erase(ptr); }

int ref_upload(void* device, const void* host, size_t bytes) {
  return run("ref_upload", [&] {
    GA_CU_CHECK(driver().cuMemcpyHtoD(dptr(device), host, bytes));
    finish();
  });
}

int ref_download(void* host, const void* device, size_t bytes) {
  return run("ref_download",
             [&] { GA_CU_CHECK(driver().cuMemcpyDtoH(host, dptr(device), bytes)); });
}

int ref_fill(void* device, unsigned char value, size_t bytes) {
  return run("ref_fill", [&] {
    GA_CU_CHECK(driver().cuMemsetD8(dptr(device), value, bytes));
    finish();
  });
}

int ref_stream_create(void** stream) {
  return run("ref_stream_create", [&] {
    CUstream s = nullptr;
    GA_CU_CHECK(driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    *stream = s;
  });
}

void ref_stream_destroy(void* stream) {
  if (stream) driver().cuStreamDestroy(stream_of(stream));
}

int ref_stream_sync(void* stream) {
  return run("ref_stream_sync",
             [&] { GA_CU_CHECK(driver().cuStreamSynchronize(stream_of(stream))); });
}

int ref_capture_begin(void* stream) {
  return run("ref_capture_begin", [&] {
    GA_CU_CHECK(
        driver().cuStreamBeginCapture(stream_of(stream), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  });
}

int ref_capture_end(void* stream, void** graph_exec) {
  return run("ref_capture_end", [&] {
    *graph_exec = nullptr;
    CUgraph graph = nullptr;
    GA_CU_CHECK(driver().cuStreamEndCapture(stream_of(stream), &graph));
    CUgraphExec exec = nullptr;
    const CUresult r = driver().cuGraphInstantiate(&exec, graph, 0);
    driver().cuGraphDestroy(graph);
    GA_CU_CHECK(r);
    *graph_exec = exec;
  });
}

int ref_graph_launch(void* graph_exec, void* stream) {
  return run("ref_graph_launch", [&] {
    GA_CU_CHECK(driver().cuGraphLaunch(static_cast<CUgraphExec>(graph_exec), stream_of(stream)));
  });
}

void ref_graph_destroy(void* graph_exec) {
  if (graph_exec) driver().cuGraphExecDestroy(static_cast<CUgraphExec>(graph_exec));
}

int ref_forward(const ref_layer_t* layer, const ref_batch_t* batch, const char* cache_dir,
                void* stream) {
  return run("ref_forward", [&] {
    const ref_layer_t& l = *layer;
    const ref_batch_t& b = *batch;
    AttentionLayerConfig c;
    c.num_heads = l.num_heads;
    c.num_kv_heads = l.num_kv_heads;
    c.head_size = l.head_size;
    c.block_size = l.block_size;
    c.dtype = l.bf16 ? DType::kBFloat16 : DType::kFloat16;
    c.kv_dtype = kv_dtype(l);
    c.layout = l.hnd ? KvLayout::kHND : KvLayout::kNHD;
    c.k_scale = l.k_scale;
    c.v_scale = l.v_scale;
    c.max_model_len = l.max_model_len;
    c.max_num_seqs = l.max_num_seqs;
    AttentionBackend attn(c);
    const auto cache = cache_in(cache_dir);
    attn.prepare(*cache);
    DeviceBuffer workspace(attn.workspace_bytes());  // zero-filled ...
    finish();                                        // ... before the stream runs

    AttentionMetadata md;
    md.query_start_loc =
        TensorView::contiguous(b.query_start_loc, ScalarType::kInt32, {b.num_reqs + 1});
    md.seq_lens = TensorView::contiguous(b.seq_lens, ScalarType::kInt32, {b.num_reqs});
    md.block_table = TensorView::contiguous(b.block_table, ScalarType::kInt32,
                                            {b.num_reqs, b.max_blocks_per_seq});
    if (b.key) md.slot_mapping = slots_view(b, b.num_tokens);
    md.num_reqs = b.num_reqs;
    md.num_decodes = b.num_decodes;
    md.num_decode_tokens = b.num_decodes;
    md.num_actual_tokens = b.num_actual_tokens;
    md.max_query_len = b.max_query_len;
    md.max_seq_len = b.max_seq_len;
    const TensorView none;
    attn.forward(rows(b.query, l, b.num_tokens, l.num_heads),
                 b.key ? rows(b.key, l, b.num_tokens, l.num_kv_heads) : none,
                 b.value ? rows(b.value, l, b.num_tokens, l.num_kv_heads) : none, cache_view(l, b),
                 rows(b.output, l, b.num_tokens, l.num_heads), md, workspace.data(),
                 workspace.bytes(), stream_of(stream));
    GA_CU_CHECK(driver().cuStreamSynchronize(stream_of(stream)));
  });
}

int ref_write_kv_cache(const ref_layer_t* layer, const ref_batch_t* batch, const char* cache_dir,
                       void* stream) {
  return run("ref_write_kv_cache", [&] {
    const ref_layer_t& l = *layer;
    const ref_batch_t& b = *batch;
    const auto cache = cache_in(cache_dir);
    write_kv_cache(rows(b.key, l, b.num_tokens, l.num_kv_heads),
                   rows(b.value, l, b.num_tokens, l.num_kv_heads), cache_view(l, b),
                   slots_view(b, b.num_tokens), l.k_scale, l.v_scale, stream_of(stream), *cache);
    GA_CU_CHECK(driver().cuStreamSynchronize(stream_of(stream)));
  });
}

int ref_forward_prefix(const ref_layer_t* layer, const ref_batch_t* batch, const char* cache_dir,
                       void* stream) {
  return run("ref_forward_prefix", [&] {
    const ref_layer_t& l = *layer;
    const ref_batch_t& b = *batch;
    const auto cache = cache_in(cache_dir);
    const PagedKvCache c = legacy_caches_of(l, b);
    const char* names[] = {"auto", "fp8_e4m3", "fp8_e5m2"};
    const TensorView none;
    forward_prefix(rows(b.query, l, b.num_tokens, l.num_heads), none, none, names[l.kv_fp8],
                   c.key_cache, c.value_cache,
                   TensorView::contiguous(b.block_table, ScalarType::kInt32,
                                          {b.num_reqs, b.max_blocks_per_seq}),
                   TensorView::contiguous(b.query_start_loc, ScalarType::kInt32, {b.num_reqs + 1}),
                   TensorView::contiguous(b.seq_lens, ScalarType::kInt32, {b.num_reqs}),
                   b.max_query_len, nullptr, 0, l.k_scale, l.v_scale,
                   rows(b.output, l, b.num_tokens, l.num_heads), stream_of(stream), *cache);
    GA_CU_CHECK(driver().cuStreamSynchronize(stream_of(stream)));
  });
}

int ref_paged_attention(const ref_layer_t* layer, const ref_batch_t* batch, float scale,
                        const char* cache_dir, void* stream) {
  return run("ref_paged_attention", [&] {
    const ref_layer_t& l = *layer;
    const ref_batch_t& b = *batch;
    const auto cache = cache_in(cache_dir);
    const PagedKvCache kv = legacy_caches_of(l, b);
    const char* name = l.kv_fp8 == 1 ? "fp8" : l.kv_fp8 == 2 ? "fp8_e5m2" : "auto";
    paged_attention_v1(rows(b.output, l, b.num_reqs, l.num_heads),
                       rows(b.query, l, b.num_reqs, l.num_heads), kv.key_cache, kv.value_cache,
                       l.num_kv_heads, scale,
                       TensorView::contiguous(b.block_table, ScalarType::kInt32,
                                              {b.num_reqs, b.max_blocks_per_seq}),
                       TensorView::contiguous(b.seq_lens, ScalarType::kInt32, {b.num_reqs}),
                       l.block_size, b.max_seq_len, TensorView(), name, l.k_scale, l.v_scale, 0, 0,
                       0, 0, 0, stream_of(stream), *cache);
    GA_CU_CHECK(driver().cuStreamSynchronize(stream_of(stream)));
  });
}

}  // extern "C"
