// The C ABI (include/graphattn/graphattn.h): a thin face over the C++ API. Each function checks
// what only this ABI can get wrong (NULL pointers, struct sizes, enum values, DLTensors),
// converts, calls the C++ API inside guard(), and turns exceptions into status codes and this
// thread's last error. Nothing here decides anything the C++ API decides.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "capi/abi_bridge.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/capture.hpp"
#include "graphattn/error.hpp"
#include "graphattn/graphattn.h"
#include "graphattn/jit.hpp"
#include "graphattn/kv_blocks.hpp"
#include "graphattn/metadata.hpp"
#include "graphattn/paged_cache.hpp"
#include "graphattn/runtime.hpp"
#include "jit_cache/disk_tier.hpp"
#include "jit_cache/trust.hpp"

#ifndef GRAPHATTN_VERSION
#error "GRAPHATTN_VERSION (the project version) must be defined by the build"
#endif

using graphattn::AttentionLayerConfig;
using graphattn::KvDType;
using graphattn::ScalarType;
using graphattn::TensorView;

struct graphattn_backend {
  explicit graphattn_backend(const AttentionLayerConfig& config) : attn(config) {}
  graphattn::AttentionBackend attn;
};

struct graphattn_cache {
  std::unique_ptr<graphattn::KernelCache> owned;  // null for the process-wide cache
  graphattn::KernelCache* cache = nullptr;
  bool shared_dir = false;  // the options' group-shared opt-in (cache_list reads with it)
};

// The C enums are the C++ enums' values, so conversions are casts once the range is checked.
static_assert(GRAPHATTN_DTYPE_FLOAT16 == static_cast<int>(graphattn::DType::kFloat16) &&
              GRAPHATTN_DTYPE_BFLOAT16 == static_cast<int>(graphattn::DType::kBFloat16));
static_assert(GRAPHATTN_KV_DTYPE_AUTO == static_cast<int>(KvDType::kAuto) &&
              GRAPHATTN_KV_DTYPE_FP8_E4M3 == static_cast<int>(KvDType::kFp8E4M3) &&
              GRAPHATTN_KV_DTYPE_FP8_E5M2 == static_cast<int>(KvDType::kFp8E5M2));
static_assert(GRAPHATTN_KV_LAYOUT_NHD == static_cast<int>(graphattn::KvLayout::kNHD) &&
              GRAPHATTN_KV_LAYOUT_HND == static_cast<int>(graphattn::KvLayout::kHND));
static_assert(GRAPHATTN_ORIGIN_MEMORY == static_cast<int>(graphattn::CacheOrigin::kMemory) &&
              GRAPHATTN_ORIGIN_DISK == static_cast<int>(graphattn::CacheOrigin::kDisk) &&
              GRAPHATTN_ORIGIN_COMPILED == static_cast<int>(graphattn::CacheOrigin::kCompiled) &&
              GRAPHATTN_ORIGIN_REMOTE == static_cast<int>(graphattn::CacheOrigin::kRemote));
static_assert(GRAPHATTN_CUDAGRAPH_NEVER == static_cast<int>(graphattn::CudaGraphSupport::kNever) &&
              GRAPHATTN_CUDAGRAPH_UNIFORM_SINGLE_TOKEN_DECODE ==
                  static_cast<int>(graphattn::CudaGraphSupport::kUniformSingleTokenDecode) &&
              GRAPHATTN_CUDAGRAPH_UNIFORM_BATCH ==
                  static_cast<int>(graphattn::CudaGraphSupport::kUniformBatch) &&
              GRAPHATTN_CUDAGRAPH_ALWAYS == static_cast<int>(graphattn::CudaGraphSupport::kAlways));

namespace {

thread_local std::string last_error;

// A failure this ABI detects itself, with the status it maps to (INVALID_ARGUMENT,
// BUFFER_TOO_SMALL).
class StatusError : public graphattn::Error {
 public:
  StatusError(graphattn_status_t status, const std::string& message)
      : Error(message), status(status) {}
  graphattn_status_t status;
};

[[noreturn]] void invalid(const std::string& message) {
  throw StatusError(GRAPHATTN_ERROR_INVALID_ARGUMENT, message);
}

template <typename T>
T& deref(T* p, const char* name) {
  if (!p) invalid(std::string(name) + " is NULL");
  return *p;
}

graphattn_status_t fail(graphattn_status_t status, const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();  // no memory for the message: the status still says what happened
  }
  return status;
}

std::string compile_message(const graphattn::CompileError& e) {
  std::string m = e.what();
  m += "\nNVRTC options:";
  for (const std::string& o : e.options()) m += " " + o;
  m += "\n(GRAPHATTN_DUMP_SOURCE=1 writes the numbered source beside the cache entry)";
  return m;
}

// Runs one ABI call's body; every exception becomes a status and this thread's last error.
template <typename Body>
graphattn_status_t guard(Body&& body) noexcept {
  try {
    body();
    last_error.clear();
    return GRAPHATTN_OK;
  } catch (const StatusError& e) {
    return fail(e.status, e.what());
  } catch (const graphattn::CompileError& e) {
    try {
      return fail(GRAPHATTN_ERROR_COMPILE, compile_message(e).c_str());
    } catch (...) {
      return fail(GRAPHATTN_ERROR_COMPILE, e.what());
    }
  } catch (const graphattn::Error& e) {
    return fail(GRAPHATTN_ERROR, e.what());
  } catch (const std::bad_alloc&) {
    return fail(GRAPHATTN_ERROR_OUT_OF_MEMORY, "graphattn: out of host memory");
  } catch (const std::exception& e) {
    return fail(GRAPHATTN_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(GRAPHATTN_ERROR_INTERNAL, "graphattn: unknown exception (a bug: please report it)");
  }
}

// A struct that starts with struct_size: the caller must have set struct_size to at least
// min_bytes, the size of the struct's first version (sizeof when it has only one; the *_init
// functions set sizeof).
template <typename S>
const S& sized(const S* s, const char* name, size_t min_bytes = sizeof(S)) {
  const S& v = deref(s, name);
  if (v.struct_size < min_bytes)
    invalid(std::string(name) + "->struct_size " + std::to_string(v.struct_size) +
            " is smaller than " + std::to_string(min_bytes) +
            " (initialise it with its _init function or set it to sizeof)");
  return v;
}

// Whether the caller's struct (struct_size bytes) holds `field`: a field added after the struct's
// first version is read or written only when it does, so an older caller's smaller struct works.
template <typename S, typename F>
bool holds(const S& s, F S::*field) {
  const size_t end = static_cast<size_t>(reinterpret_cast<const char*>(&(s.*field)) -
                                         reinterpret_cast<const char*>(&s)) +
                     sizeof(s.*field);
  return end <= s.struct_size;
}

// The metadata's first version ended with max_seq_len.
constexpr size_t kMetadataV1Bytes = offsetof(graphattn_metadata_t, max_seq_len) + sizeof(int);

// The layer configuration's first version ended with check_bounds.
constexpr size_t kLayerConfigV1Bytes =
    offsetof(graphattn_layer_config_t, check_bounds) + sizeof(int);

// A C enum the caller filled in, read as the int it holds: loading an out-of-range value through
// the enum type is undefined in C++ (the type's range is that of its enumerators), and a caller
// may hold any int there.
template <typename CEnum>
int raw_int(const CEnum& field) {
  static_assert(sizeof(CEnum) == sizeof(int), "graphattn.h's enums are int-sized (*_ENUM_MAX)");
  int v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

template <typename E, typename CEnum>
E enum_value(const CEnum& field, int count, const char* name, const char* allowed) {
  const int v = raw_int(field);
  if (v < 0 || v >= count)
    invalid(std::string(name) + " " + std::to_string(v) + " is out of range; allowed: " + allowed);
  return static_cast<E>(v);
}

KvDType kv_dtype_value(const graphattn_kv_dtype_t& v, const char* name) {
  return enum_value<KvDType>(v, 3, name,
                             "0 (GRAPHATTN_KV_DTYPE_AUTO), 1 (GRAPHATTN_KV_DTYPE_FP8_E4M3), "
                             "2 (GRAPHATTN_KV_DTYPE_FP8_E5M2)");
}

AttentionLayerConfig to_cpp(const graphattn_layer_config_t* config) {
  const graphattn_layer_config_t& c = sized(config, "config", kLayerConfigV1Bytes);
  AttentionLayerConfig o;
  if (holds(c, &graphattn_layer_config_t::attn_type))
    o.attn_type = enum_value<graphattn::AttentionType>(
        c.attn_type, 4, "config->attn_type",
        "0 (GRAPHATTN_ATTN_DECODER), 1 (GRAPHATTN_ATTN_ENCODER), 2 (GRAPHATTN_ATTN_ENCODER_ONLY), "
        "3 (GRAPHATTN_ATTN_ENCODER_DECODER)");
  o.num_heads = c.num_heads;
  o.num_kv_heads = c.num_kv_heads;
  o.head_size = c.head_size;
  o.block_size = c.block_size;
  o.dtype = enum_value<graphattn::DType>(
      c.dtype, 2, "config->dtype", "0 (GRAPHATTN_DTYPE_FLOAT16), 1 (GRAPHATTN_DTYPE_BFLOAT16)");
  o.kv_dtype = kv_dtype_value(c.kv_dtype, "config->kv_dtype");
  o.layout = enum_value<graphattn::KvLayout>(
      c.layout, 2, "config->layout", "0 (GRAPHATTN_KV_LAYOUT_NHD), 1 (GRAPHATTN_KV_LAYOUT_HND)");
  o.window = c.window;
  o.soft_cap = c.soft_cap;
  o.scale = c.scale;
  o.k_scale = c.k_scale;
  o.v_scale = c.v_scale;
  o.max_model_len = c.max_model_len;
  o.max_num_seqs = c.max_num_seqs;
  o.arch = c.arch;
  o.overlap_previous_kernel = c.overlap_previous_kernel != 0;
  o.check_bounds = c.check_bounds != 0;
  if (holds(c, &graphattn_layer_config_t::alibi_slopes)) o.alibi_slopes = c.alibi_slopes;
  if (holds(c, &graphattn_layer_config_t::sinks)) o.sinks = c.sinks;
  if (holds(c, &graphattn_layer_config_t::k_scale_device)) o.k_scale_device = c.k_scale_device;
  if (holds(c, &graphattn_layer_config_t::v_scale_device)) o.v_scale_device = c.v_scale_device;
  if (holds(c, &graphattn_layer_config_t::decode_query_len))
    o.decode_query_len = c.decode_query_len;  // its range: attention_config_problem()
  if (holds(c, &graphattn_layer_config_t::blocksparse_active_head_offset))
    o.blocksparse = {c.blocksparse_block_size, c.blocksparse_local_blocks,
                     c.blocksparse_vert_stride, c.blocksparse_head_sliding_step,
                     c.blocksparse_active_head_offset};  // checked by attention_config_problem()
  return o;
}

// Every field but struct_size that the caller's struct holds.
void from_cpp(const AttentionLayerConfig& o, graphattn_layer_config_t* c) {
  c->num_heads = o.num_heads;
  c->num_kv_heads = o.num_kv_heads;
  c->head_size = o.head_size;
  c->block_size = o.block_size;
  c->dtype = static_cast<graphattn_dtype_t>(o.dtype);
  c->kv_dtype = static_cast<graphattn_kv_dtype_t>(o.kv_dtype);
  c->layout = static_cast<graphattn_kv_layout_t>(o.layout);
  c->window = o.window;
  c->soft_cap = o.soft_cap;
  c->scale = o.scale;
  c->k_scale = o.k_scale;
  c->v_scale = o.v_scale;
  c->max_model_len = o.max_model_len;
  c->max_num_seqs = o.max_num_seqs;
  c->arch = o.arch;
  c->overlap_previous_kernel = o.overlap_previous_kernel ? 1 : 0;
  c->check_bounds = o.check_bounds ? 1 : 0;
  if (holds(*c, &graphattn_layer_config_t::alibi_slopes)) c->alibi_slopes = o.alibi_slopes;
  if (holds(*c, &graphattn_layer_config_t::sinks)) c->sinks = o.sinks;
  if (holds(*c, &graphattn_layer_config_t::attn_type))
    c->attn_type = static_cast<graphattn_attn_type_t>(o.attn_type);
  if (holds(*c, &graphattn_layer_config_t::k_scale_device)) c->k_scale_device = o.k_scale_device;
  if (holds(*c, &graphattn_layer_config_t::v_scale_device)) c->v_scale_device = o.v_scale_device;
  if (holds(*c, &graphattn_layer_config_t::decode_query_len))
    c->decode_query_len = o.decode_query_len;
  if (holds(*c, &graphattn_layer_config_t::blocksparse_active_head_offset)) {
    c->blocksparse_block_size = o.blocksparse.block_size;
    c->blocksparse_local_blocks = o.blocksparse.local_blocks;
    c->blocksparse_vert_stride = o.blocksparse.vert_stride;
    c->blocksparse_head_sliding_step = o.blocksparse.head_sliding_step;
    c->blocksparse_active_head_offset = o.blocksparse.active_head_offset;
  }
}

graphattn::KernelCache& cache_of(graphattn_cache_t cache) {
  return cache ? *cache->cache : graphattn::default_kernel_cache();
}

// ---- DLTensor -> TensorView

// DLDeviceType names (DLPack 1.1), by value.
const char* device_name(int type) {
  static const char* const kNames[] = {
      "unknown", "CPU", "CUDA", "CUDA host (pinned)", "OpenCL", "unknown",      "unknown", "Vulkan",
      "Metal",   "VPI", "ROCm", "ROCm host",          "ExtDev", "CUDA managed", "oneAPI",  "WebGPU",
      "Hexagon"};
  return type >= 0 && type < static_cast<int>(std::size(kNames)) ? kNames[type] : "unknown";
}

// DLPack 1.1's float8 type codes (absent from older dlpack.h).
constexpr int kDLFloat8E4M3FN = 10;
constexpr int kDLFloat8E5M2 = 12;

// E.g. "float64", "uint8", "float8_e5m2", "float16 x2 lanes".
std::string dtype_name(const DLDataType& t) {
  static const char* const kBase[] = {"int",    "uint",    "float", "opaque",
                                      "bfloat", "complex", "bool"};
  std::string s = t.code == kDLFloat8E4M3FN ? std::string("float8_e4m3fn")
                  : t.code == kDLFloat8E5M2 ? std::string("float8_e5m2")
                  : t.code < 7              ? kBase[t.code] + std::to_string(t.bits)
                                            : "unknown type code " + std::to_string(t.code);
  if (t.lanes != 1) s += " x" + std::to_string(t.lanes) + " lanes";
  return s;
}

// The element type of a DLTensor. kv_cache (non-null: the tensor is a KV cache of that kv dtype)
// admits uint8 and the float8 codes, which must agree with it.
ScalarType scalar_of(const DLDataType& t, const char* name, const KvDType* kv_cache) {
  const auto is = [&](int code, int bits) { return t.code == code && t.bits == bits; };
  if (t.lanes == 1) {
    if (is(kDLFloat, 16)) return ScalarType::kFloat16;
    if (is(kDLBfloat, 16)) return ScalarType::kBFloat16;
    if (is(kDLFloat, 32)) return ScalarType::kFloat32;
    if (is(kDLInt, 32)) return ScalarType::kInt32;
    if (is(kDLInt, 64)) return ScalarType::kInt64;
    if (kv_cache && (is(kDLUInt, 8) || is(kDLFloat8E4M3FN, 8) || is(kDLFloat8E5M2, 8))) {
      const KvDType kv = *kv_cache;
      const KvDType held = is(kDLFloat8E4M3FN, 8) ? KvDType::kFp8E4M3
                           : is(kDLFloat8E5M2, 8) ? KvDType::kFp8E5M2
                                                  : kv;
      if (kv == KvDType::kAuto || held != kv)
        invalid(std::string(name) + " has dtype " + dtype_name(t) + " but the KV cache dtype is " +
                graphattn::to_string(kv) +
                "; an 8-bit KV cache needs kv dtype fp8_e4m3 (uint8 or float8_e4m3fn, code 10) "
                "or fp8_e5m2 (uint8 or float8_e5m2, code 12)");
      return kv == KvDType::kFp8E4M3 ? ScalarType::kFloat8E4M3 : ScalarType::kFloat8E5M2;
    }
  }
  invalid(std::string(name) + " has dtype " + dtype_name(t) + " (code " + std::to_string(t.code) +
          ", bits " + std::to_string(t.bits) + ", lanes " + std::to_string(t.lanes) +
          "); supported: float16, bfloat16, float32, int32, int64" +
          (kv_cache ? ", and for an fp8 KV cache uint8, float8_e4m3fn (code 10) or float8_e5m2 "
                      "(code 12)"
                    : ""));
}

// What to do with a NULL DLTensor.
enum class Null { kRejected, kEmpty };

// The one conversion of a DLTensor, checked in this order so that host arrays (NumPy) get their
// dtype and rank errors before the device error: NULL, ndim, dtype, sizes, strides, byte_offset,
// device. A NULL tensor where allowed is an empty view (ndim 0).
TensorView view_of(const DLTensor* t, const char* name, Null null = Null::kRejected,
                   const KvDType* kv_cache = nullptr, bool host_allowed = false) {
  TensorView v;
  if (!t) {
    if (null == Null::kEmpty) return v;
    invalid(std::string(name) + " is NULL");
  }
  if (t->ndim < 0 || t->ndim > graphattn::kMaxDims)
    invalid(std::string(name) + " has ndim " + std::to_string(t->ndim) + "; supported: 0.." +
            std::to_string(graphattn::kMaxDims));
  if (t->ndim > 0 && !t->shape) invalid(std::string(name) + " has a NULL shape");
  v.dtype = scalar_of(t->dtype, name, kv_cache);
  v.ndim = t->ndim;
  for (int d = 0; d < v.ndim; ++d) {
    if (t->shape[d] < 0)
      invalid(std::string(name) + " has size " + std::to_string(t->shape[d]) + " in dimension " +
              std::to_string(d) + "; sizes are >= 0");
    v.shape[d] = t->shape[d];
  }
  int64_t compact = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = t->strides ? t->strides[d] : compact;
    compact *= v.shape[d];
  }
  v.data = t->data ? static_cast<char*>(t->data) + t->byte_offset : nullptr;
  const int device = t->device.device_type;
  if (host_allowed && (device == kDLCPU || device == kDLCUDAHost)) return v;
  if (device != kDLCUDA && device != kDLCUDAManaged)
    invalid(std::string(name) + " is on device type " + std::to_string(device) + " (" +
            device_name(device) +
            "); graphattn needs CUDA device memory (kDLCUDA or kDLCUDAManaged)");
  return v;
}

// ---- Output helpers

// s with its NUL into buf; *needed gets the bytes needed.
void copy_string(const std::string& s, char* buf, size_t capacity, size_t* needed,
                 const char* what) {
  if (!buf && capacity > 0) invalid("buf is NULL with capacity " + std::to_string(capacity));
  if (needed) *needed = s.size() + 1;
  if (capacity < s.size() + 1) {
    if (capacity > 0) buf[0] = '\0';
    throw StatusError(GRAPHATTN_ERROR_BUFFER_TOO_SMALL,
                      std::string(what) + " needs " + std::to_string(s.size() + 1) +
                          " bytes (NUL included); the buffer has " + std::to_string(capacity));
  }
  std::memcpy(buf, s.c_str(), s.size() + 1);
}

// s into a fixed char array, truncated to fit, always NUL-terminated.
template <size_t N>
void copy_fixed(char (&dst)[N], const std::string& s) {
  const size_t n = std::min(s.size(), N - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// The first min(items, capacity) of `items` into out through put(i); *count gets the total.
template <typename Put>
void copy_array(size_t items, size_t capacity, size_t* count, bool out_null, const char* what,
                Put put) {
  if (out_null && capacity > 0)
    invalid(std::string(what) + " array is NULL with capacity " + std::to_string(capacity));
  deref(count, "count") = items;
  for (size_t i = 0; i < std::min(items, capacity); ++i) put(i);
  if (items > capacity)
    throw StatusError(GRAPHATTN_ERROR_BUFFER_TOO_SMALL, "there are " + std::to_string(items) + " " +
                                                            what + " but room for " +
                                                            std::to_string(capacity));
}

// Host metadata for the builder's batch-shape questions, which read only the query lengths.
graphattn::CommonAttentionMetadata batch_of(const int32_t* query_start_loc, int num_reqs) {
  deref(query_start_loc, "query_start_loc");
  if (num_reqs < 0) invalid("num_reqs " + std::to_string(num_reqs) + " must be >= 0");
  std::vector<int32_t> query_lens(static_cast<size_t>(num_reqs));
  for (int r = 0; r < num_reqs; ++r) {
    const int64_t len = int64_t{query_start_loc[r + 1]} - query_start_loc[r];
    if (len > std::numeric_limits<int32_t>::max() || len < std::numeric_limits<int32_t>::min())
      invalid("query_start_loc[" + std::to_string(r + 1) + "] - query_start_loc[" +
              std::to_string(r) + "] = " + std::to_string(len) + " does not fit int32");
    query_lens[r] = static_cast<int32_t>(len);  // a negative length is the builder's to reject
  }
  const int64_t tokens =
      static_cast<int64_t>(query_start_loc[num_reqs]) - static_cast<int64_t>(query_start_loc[0]);
  // seq_lens are not read by these questions; the query lengths stand in for them.
  return graphattn::CommonAttentionMetadata::make(
      query_lens, query_lens, {}, 0,
      std::vector<int64_t>(static_cast<size_t>(std::max<int64_t>(tokens, 0)), -1));
}

// A one-element float32 device tensor (any rank): its address.
float* device_scalar_of(const DLTensor* t, const char* name) {
  const TensorView v = view_of(t, name);
  int64_t n = 1;
  for (int d = 0; d < v.ndim; ++d) n *= v.shape[d];
  if (v.dtype != graphattn::ScalarType::kFloat32 || n != 1)
    invalid(std::string(name) + " " + v.describe() +
            " is not supported; supported: a one-element float32 device tensor");
  return static_cast<float*>(v.data);
}

// A cache that swap_blocks / copy_blocks copy bytes of: any element type graphattn knows, 8-bit
// ones (uint8, float8) read as the fp8 type they are tagged with (uint8: e4m3, same size).
TensorView block_cache_of(const DLTensor* t, const char* name, bool host_allowed) {
  const KvDType kv = t && t->dtype.code == kDLFloat8E5M2 ? KvDType::kFp8E5M2 : KvDType::kFp8E4M3;
  return view_of(t, name, Null::kRejected, &kv, host_allowed);
}

// A host block mapping of num_pairs (src, dst) int64 pairs.
std::vector<graphattn::BlockPair> pairs_of(const int64_t* mapping, size_t num_pairs) {
  if (num_pairs > 0) deref(mapping, "block_mapping");
  std::vector<graphattn::BlockPair> out(num_pairs);
  for (size_t i = 0; i < num_pairs; ++i) out[i] = {mapping[2 * i], mapping[2 * i + 1]};
  return out;
}

static_assert(GRAPHATTN_K_SCALE_DIVISOR == graphattn::kKScaleDivisor &&
                  GRAPHATTN_V_SCALE_DIVISOR == graphattn::kVScaleDivisor,
              "graphattn.h and backend.hpp name vLLM's divisors alike");

}  // namespace

// ---- Library

extern "C" {

int graphattn_abi_version(void) noexcept { return GRAPHATTN_ABI_VERSION; }

const char* graphattn_version(void) noexcept { return GRAPHATTN_VERSION; }

const char* graphattn_last_error(void) noexcept { return last_error.c_str(); }

const char* graphattn_status_string(graphattn_status_t status) noexcept {
  switch (raw_int(status)) {
    case GRAPHATTN_OK:
      return "GRAPHATTN_OK";
    case GRAPHATTN_ERROR:
      return "GRAPHATTN_ERROR";
    case GRAPHATTN_ERROR_INVALID_ARGUMENT:
      return "GRAPHATTN_ERROR_INVALID_ARGUMENT";
    case GRAPHATTN_ERROR_COMPILE:
      return "GRAPHATTN_ERROR_COMPILE";
    case GRAPHATTN_ERROR_OUT_OF_MEMORY:
      return "GRAPHATTN_ERROR_OUT_OF_MEMORY";
    case GRAPHATTN_ERROR_BUFFER_TOO_SMALL:
      return "GRAPHATTN_ERROR_BUFFER_TOO_SMALL";
    case GRAPHATTN_ERROR_INTERNAL:
      return "GRAPHATTN_ERROR_INTERNAL";
  }
  return "GRAPHATTN_STATUS_UNKNOWN";
}

graphattn_status_t graphattn_gpu_available(int* available) noexcept {
  std::string why;
  const graphattn_status_t s = guard([&] {
    int& out = deref(available, "available");
    out = graphattn::gpu_available(&why) ? 1 : 0;
  });
  if (s == GRAPHATTN_OK && *available == 0) fail(GRAPHATTN_OK, why.c_str());
  return s;
}

graphattn_status_t graphattn_ensure_context(int device) noexcept {
  return guard([&] { graphattn::ensure_context(device); });
}

graphattn_status_t graphattn_device_count(int* count) noexcept {
  return guard([&] { deref(count, "count") = graphattn::device_count(); });
}

graphattn_status_t graphattn_use_device(int device) noexcept {
  return guard([&] {
    const int count = graphattn::device_count();
    try {
      graphattn::use_device(device);
    } catch (const graphattn::Error& e) {
      // A device that does not exist is the caller's argument; a missing GPU or a driver
      // failure stays GRAPHATTN_ERROR.
      if (count > 0 && (device < 0 || device >= count)) invalid(e.what());
      throw;
    }
  });
}

graphattn_status_t graphattn_current_device_arch(int* arch) noexcept {
  return guard([&] {
    int& out = deref(arch, "arch");
    out = graphattn::current_device_arch();
  });
}

// ---- Layer configuration

void graphattn_layer_config_init(graphattn_layer_config_t* config) noexcept {
  if (!config) return;
  *config = graphattn_layer_config_t{};
  config->struct_size = sizeof(graphattn_layer_config_t);
  from_cpp(AttentionLayerConfig{}, config);
}

graphattn_status_t graphattn_layer_config_check(const graphattn_layer_config_t* config) noexcept {
  return guard([&] {
    const std::string problem = graphattn::attention_config_problem(to_cpp(config));
    if (!problem.empty()) throw graphattn::Error(problem);
  });
}

graphattn_status_t graphattn_blocksparse_head_sliding_step(int total_num_heads,
                                                           int total_num_kv_heads, int vert_stride,
                                                           int homo_head, int homo_head_group,
                                                           int* step) noexcept {
  return guard([&] {
    deref(step, "step") = graphattn::blocksparse_head_sliding_step(
        total_num_heads, total_num_kv_heads, vert_stride, homo_head != 0, homo_head_group != 0);
  });
}

// ---- Kernel cache

void graphattn_cache_options_init(graphattn_cache_options_t* options) noexcept {
  if (!options) return;
  const graphattn::CacheOptions d;
  *options = graphattn_cache_options_t{};
  options->struct_size = sizeof(graphattn_cache_options_t);
  options->dir = nullptr;
  options->use_disk = d.use_disk ? 1 : 0;
  options->max_bytes = d.max_bytes;
  options->lock_timeout_ms = static_cast<int>(d.lock_timeout.count());
  options->dump_source = d.dump_source ? 1 : 0;
  options->shared_dir = d.shared_dir ? 1 : 0;
}

graphattn_status_t graphattn_cache_create(const graphattn_cache_options_t* options,
                                          graphattn_cache_t* cache) noexcept {
  return guard([&] {
    deref(cache, "cache") = nullptr;
    graphattn::CacheOptions o;
    if (options) {
      const graphattn_cache_options_t& c = sized(options, "options");
      if (c.lock_timeout_ms < 0)
        invalid("options->lock_timeout_ms " + std::to_string(c.lock_timeout_ms) + " must be >= 0");
      o.dir = c.dir ? c.dir : "";
      o.use_disk = c.use_disk != 0;
      o.max_bytes = c.max_bytes;
      o.lock_timeout = std::chrono::milliseconds(c.lock_timeout_ms);
      o.dump_source = c.dump_source != 0;
      o.shared_dir = c.shared_dir != 0;
    }
    const bool shared = o.shared_dir || graphattn::detail::shared_cache_requested();
    auto handle = std::make_unique<graphattn_cache>();
    handle->shared_dir = shared;
    handle->owned = std::make_unique<graphattn::KernelCache>(std::move(o));
    handle->cache = handle->owned.get();
    *cache = handle.release();
  });
}

graphattn_status_t graphattn_cache_default(graphattn_cache_t* cache) noexcept {
  return guard([&] {
    deref(cache, "cache") = nullptr;
    static graphattn_cache shared{nullptr, &graphattn::default_kernel_cache(),
                                  graphattn::detail::shared_cache_requested()};
    *cache = &shared;
  });
}

void graphattn_cache_destroy(graphattn_cache_t cache) noexcept {
  if (cache && cache->owned) delete cache;
}

graphattn_status_t graphattn_cache_stats(graphattn_cache_t cache,
                                         graphattn_cache_stats_t* stats) noexcept {
  return guard([&] {
    const graphattn::CacheStats s = deref(cache, "cache").cache->stats();
    graphattn_cache_stats_t& out = deref(stats, "stats");
    // Fields past the caller's struct_size are not written (an older caller's smaller struct).
    const auto put = [&](auto field, auto value) {
      if (holds(out, field)) out.*field = value;
    };
    if (out.struct_size < offsetof(graphattn_cache_stats_t, memory_hits) + sizeof(uint64_t))
      invalid("stats->struct_size " + std::to_string(out.struct_size) +
              " leaves no room for a counter; set it to sizeof(graphattn_cache_stats_t)");
    put(&graphattn_cache_stats_t::memory_hits, s.memory_hits);
    put(&graphattn_cache_stats_t::disk_hits, s.disk_hits);
    put(&graphattn_cache_stats_t::misses, s.misses);
    put(&graphattn_cache_stats_t::compiles, s.compiles);
    put(&graphattn_cache_stats_t::compile_failures, s.compile_failures);
    put(&graphattn_cache_stats_t::repairs, s.repairs);
    put(&graphattn_cache_stats_t::evictions, s.evictions);
    put(&graphattn_cache_stats_t::compile_ms, s.compile_ms);
    put(&graphattn_cache_stats_t::write_failures, s.write_failures);
  });
}

graphattn_status_t graphattn_cache_dir(graphattn_cache_t cache, char* buf, size_t capacity,
                                       size_t* needed) noexcept {
  return guard([&] {
    copy_string(deref(cache, "cache").cache->dir(), buf, capacity, needed, "the cache directory");
  });
}

graphattn_status_t graphattn_cache_precompile(graphattn_cache_t cache, const char* const* specs,
                                              size_t num_specs, unsigned threads,
                                              graphattn_precompile_result_t* results) noexcept {
  return guard([&] {
    graphattn::KernelCache& kc = *deref(cache, "cache").cache;
    if (num_specs > 0) deref(specs, "specs");
    for (size_t i = 0; i < num_specs; ++i)
      if (!specs[i]) invalid("specs[" + std::to_string(i) + "] is NULL");
    // Strings the parser rejects fail alone; the others compile together on the pool.
    std::vector<graphattn::PrecompileResult> done(num_specs);
    std::vector<graphattn::AttentionSpec> parsed;
    std::vector<size_t> parsed_index;
    for (size_t i = 0; i < num_specs; ++i) {
      done[i].spec = specs[i];
      try {
        parsed.push_back(graphattn::AttentionSpec::parse(specs[i]));
        parsed_index.push_back(i);
      } catch (const graphattn::Error& e) {
        done[i].error = e.what();
      }
    }
    const std::vector<graphattn::PrecompileResult> compiled = kc.precompile(parsed, threads);
    for (size_t j = 0; j < compiled.size(); ++j) done[parsed_index[j]] = compiled[j];
    size_t failures = 0;
    const graphattn::PrecompileResult* first = nullptr;
    for (size_t i = 0; i < num_specs; ++i) {
      const graphattn::PrecompileResult& r = done[i];
      if (!r.error.empty() && !failures++) first = &r;
      if (!results) continue;
      results[i] = graphattn_precompile_result_t{};
      results[i].origin = static_cast<graphattn_cache_origin_t>(r.origin);
      results[i].ms = r.ms;
      results[i].ok = r.error.empty() ? 1 : 0;
      copy_fixed(results[i].error, r.error);
    }
    if (first)
      throw graphattn::Error(std::to_string(failures) + " of " + std::to_string(num_specs) +
                             " specs failed; the first, " + first->spec + ": " + first->error);
  });
}

graphattn_status_t graphattn_cache_list(graphattn_cache_t cache, graphattn_cache_entry_t* entries,
                                        size_t capacity, size_t* count) noexcept {
  return guard([&] {
    const graphattn_cache& c = deref(cache, "cache");
    const std::string dir = c.cache->dir();  // "" unless the cache trusted and uses it
    std::vector<graphattn::detail::EntryInfo> found;
    // The reader graphattn-cache lists with (it creates nothing); its warnings are the
    // cache's, already given.
    if (!dir.empty())
      found = graphattn::detail::DiskTier(dir, nullptr, c.shared_dir,
                                          graphattn::detail::DiskTier::Access::kInspect)
                  .list();
    copy_array(found.size(), capacity, count, entries == nullptr, "cache entries", [&](size_t i) {
      const graphattn::detail::EntryInfo& e = found[i];
      const bool ok = e.status == graphattn::detail::EntryStatus::kOk;
      graphattn_cache_entry_t& out = entries[i];
      out = graphattn_cache_entry_t{};
      copy_fixed(out.key, e.key_hex);
      copy_fixed(out.spec, ok ? e.header.spec : "");
      out.arch = ok ? static_cast<int>(e.header.arch) : 0;
      out.ok = ok ? 1 : 0;
      copy_fixed(out.status, graphattn::detail::to_string(e.status));
      out.file_bytes = e.file_bytes;
      out.last_used_ms = e.last_used_ms;
      out.compiled_at_ms = ok ? e.header.compiled_at_ms : 0;
    });
  });
}

// ---- Attention backend

graphattn_status_t graphattn_backend_create(const graphattn_layer_config_t* config,
                                            graphattn_backend_t* backend) noexcept {
  return guard([&] {
    deref(backend, "backend") = nullptr;
    *backend = new graphattn_backend(to_cpp(config));
  });
}

void graphattn_backend_destroy(graphattn_backend_t backend) noexcept { delete backend; }

graphattn_status_t graphattn_backend_config(graphattn_backend_t backend,
                                            graphattn_layer_config_t* config) noexcept {
  return guard([&] {
    const AttentionLayerConfig& c = deref(backend, "backend").attn.config();
    sized(config, "config", kLayerConfigV1Bytes);
    from_cpp(c, config);
  });
}

graphattn_status_t graphattn_backend_spec(graphattn_backend_t backend, int index, char* buf,
                                          size_t capacity, size_t* needed, int* count) noexcept {
  return guard([&] {
    const std::vector<graphattn::AttentionSpec> specs =
        deref(backend, "backend").attn.required_specs();
    const int n = static_cast<int>(specs.size());
    if (count) *count = n;
    if (index < 0 || index >= n)
      invalid("spec index " + std::to_string(index) + " is out of range; the backend has " +
              std::to_string(n) + " specs (0.." + std::to_string(n - 1) + ")");
    copy_string(specs[static_cast<size_t>(index)].to_string(), buf, capacity, needed,
                "the spec string");
  });
}

graphattn_status_t graphattn_backend_prepare(graphattn_backend_t backend,
                                             graphattn_cache_t cache) noexcept {
  return guard([&] { deref(backend, "backend").attn.prepare(cache_of(cache)); });
}

graphattn_status_t graphattn_backend_take_bounds_violation(
    graphattn_backend_t backend, graphattn_bounds_violation_t* violation) noexcept {
  return guard([&] {
    graphattn_bounds_violation_t& out = deref(violation, "violation");
    const graphattn::BoundsViolation v = deref(backend, "backend").attn.take_bounds_violation();
    static_assert(
        GRAPHATTN_BOUNDS_BLOCK_ID == static_cast<int>(graphattn::BoundsViolation::Kind::kBlockId) &&
        GRAPHATTN_BOUNDS_SLOT == static_cast<int>(graphattn::BoundsViolation::Kind::kSlot));
    out = graphattn_bounds_violation_t{};
    out.kind = static_cast<graphattn_bounds_kind_t>(v.kind);
    out.request = v.request;
    out.position = v.position;
    out.value = v.value;
    if (v) copy_fixed(out.message, v.describe());
  });
}

graphattn_status_t graphattn_backend_workspace_bytes(graphattn_backend_t backend,
                                                     size_t* bytes) noexcept {
  return guard([&] {
    const graphattn::AttentionBackend& attn = deref(backend, "backend").attn;
    size_t& out = deref(bytes, "bytes");
    out = attn.workspace_bytes();
  });
}

void graphattn_metadata_init(graphattn_metadata_t* metadata) noexcept {
  if (!metadata) return;
  *metadata = graphattn_metadata_t{};
  metadata->struct_size = sizeof(graphattn_metadata_t);
}

graphattn_status_t graphattn_backend_forward(graphattn_backend_t backend, const DLTensor* query,
                                             const DLTensor* key, const DLTensor* value,
                                             const DLTensor* kv_cache, const DLTensor* output,
                                             const graphattn_metadata_t* metadata, void* workspace,
                                             size_t workspace_bytes, void* stream) noexcept {
  return guard([&] {
    const graphattn::AttentionBackend& attn = deref(backend, "backend").attn;
    const graphattn_metadata_t& m = sized(metadata, "metadata", kMetadataV1Bytes);
    // Every tensor is converted before the C++ forward sees any of them.
    const TensorView q = view_of(query, "query");
    const TensorView k = view_of(key, "key", Null::kEmpty);
    const TensorView v = view_of(value, "value", Null::kEmpty);
    if (key && k.ndim == 0)  // the C++ forward reads a 0-d key as "no cache write"
      invalid(
          "key is 0-d; pass [num_tokens, num_kv_heads, head_size] keys and values, or NULL "
          "for both (no cache write)");
    if (!key != !value)
      invalid(std::string(key ? "value" : "key") + " is NULL but " + (key ? "key" : "value") +
              " is not; pass both (to write them to the cache) or neither");
    const KvDType kv = attn.config().kv_dtype;
    // An encoder-only layer has no cache: its cache, sequence lengths, block table and slots
    // may be NULL (they are not read).
    const bool no_cache = attn.config().attn_type == graphattn::AttentionType::kEncoderOnly;
    const Null paged = no_cache ? Null::kEmpty : Null::kRejected;
    const TensorView cache = view_of(kv_cache, "kv_cache", paged, &kv);
    const TensorView out = view_of(output, "output");
    graphattn::AttentionMetadata md;
    md.query_start_loc = view_of(m.query_start_loc, "query_start_loc");
    md.seq_lens = view_of(m.seq_lens, "seq_lens", paged);
    md.block_table = view_of(m.block_table, "block_table", paged);
    md.slot_mapping =
        view_of(m.slot_mapping, "slot_mapping", key && !no_cache ? Null::kRejected : Null::kEmpty);
    md.num_reqs = m.num_reqs;
    md.num_decodes = m.num_decodes;
    md.num_decode_tokens = m.num_decode_tokens;
    md.num_actual_tokens = m.num_actual_tokens;
    md.max_query_len = m.max_query_len;
    md.max_seq_len = m.max_seq_len;
    md.device_split = holds(m, &graphattn_metadata_t::device_split) && m.device_split != 0;
    attn.forward(q, k, v, cache, out, md, workspace, workspace_bytes,
                 static_cast<CUstream>(stream));
  });
}

graphattn_status_t graphattn_write_kv_cache(const DLTensor* key, const DLTensor* value,
                                            const DLTensor* kv_cache, const DLTensor* slot_mapping,
                                            graphattn_kv_dtype_t kv_dtype, float k_scale,
                                            float v_scale, void* stream,
                                            graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView k = view_of(key, "key");
    const TensorView v = view_of(value, "value");
    const KvDType kv = kv_dtype_value(kv_dtype, "kv_dtype");
    const TensorView c = view_of(kv_cache, "kv_cache", Null::kRejected, &kv);
    const TensorView s = view_of(slot_mapping, "slot_mapping");
    graphattn::write_kv_cache(k, v, c, s, k_scale, v_scale, static_cast<CUstream>(stream),
                              cache_of(cache));
  });
}

graphattn_status_t graphattn_write_to_paged_cache(
    const DLTensor* key, const DLTensor* value, const DLTensor* key_cache,
    const DLTensor* value_cache, const DLTensor* slot_mapping, graphattn_kv_dtype_t kv_dtype,
    float k_scale, float v_scale, void* stream, graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView k = view_of(key, "key");
    const TensorView v = view_of(value, "value");
    const KvDType kv = kv_dtype_value(kv_dtype, "kv_dtype");
    const TensorView kc = view_of(key_cache, "key_cache", Null::kRejected, &kv);
    const TensorView vc = view_of(value_cache, "value_cache", Null::kRejected, &kv);
    const TensorView s = view_of(slot_mapping, "slot_mapping");
    graphattn::write_to_paged_cache(k, v, kc, vc, s, k_scale, v_scale,
                                    static_cast<CUstream>(stream), cache_of(cache));
  });
}

// An optional float32 [n] device array (ALiBi slopes, sink logits): its data or null.
const float* floats_of(const DLTensor* t, const char* name) {
  const TensorView v = view_of(t, name, Null::kEmpty);
  if (v.ndim == 0) return nullptr;
  if (v.ndim != 1 || v.dtype != ScalarType::kFloat32 || v.strides[0] != 1)
    invalid(std::string(name) + " must be a contiguous float32 [num_heads] tensor, got " +
            v.describe());
  return static_cast<const float*>(v.data);
}

graphattn_status_t graphattn_forward_prefix(
    const DLTensor* query, const DLTensor* key, const DLTensor* value,
    graphattn_kv_dtype_t kv_dtype, const DLTensor* key_cache, const DLTensor* value_cache,
    const DLTensor* block_tables, const DLTensor* query_start_loc, const DLTensor* seq_lens,
    int max_query_len, const DLTensor* alibi_slopes, int sliding_window, float k_scale,
    float v_scale, float scale, float soft_cap, const DLTensor* sinks, int causal,
    const DLTensor* output, void* stream, graphattn_cache_t cache) noexcept {
  return guard([&] {
    // One statement each: the first bad tensor, in argument order, is the one named.
    const TensorView q = view_of(query, "query");
    const TensorView k = view_of(key, "key", Null::kEmpty);
    const TensorView v = view_of(value, "value", Null::kEmpty);
    const KvDType kv = kv_dtype_value(kv_dtype, "kv_dtype");
    const TensorView kc = view_of(key_cache, "key_cache", Null::kRejected, &kv);
    const TensorView vc = view_of(value_cache, "value_cache", Null::kRejected, &kv);
    const TensorView bt = view_of(block_tables, "block_tables");
    const TensorView qsl = view_of(query_start_loc, "query_start_loc");
    const TensorView sl = view_of(seq_lens, "seq_lens");
    const float* slopes = floats_of(alibi_slopes, "alibi_slopes");
    const float* sink = floats_of(sinks, "sinks");
    const TensorView o = view_of(output, "output");
    graphattn::PrefixOptions opt;
    opt.scale = scale;
    opt.soft_cap = soft_cap;
    opt.sinks = sink;
    opt.causal = causal != 0;
    static const char* const kNames[] = {"auto", "fp8_e4m3", "fp8_e5m2"};
    graphattn::forward_prefix(q, k, v, kNames[static_cast<int>(kv)], kc, vc, bt, qsl, sl,
                              max_query_len, slopes, sliding_window, k_scale, v_scale, o,
                              static_cast<CUstream>(stream), cache_of(cache), opt);
  });
}

// The legacy caches and vLLM's kv_cache_dtype name of a paged_attention call (uint8 caches are
// read as the name says).
struct LegacyCacheViews {
  std::string kv_cache_dtype;
  TensorView key_cache, value_cache;
};
LegacyCacheViews legacy_caches_of(const DLTensor* key_cache, const DLTensor* value_cache,
                                  const char* kv_cache_dtype) {
  if (!kv_cache_dtype) invalid("kv_cache_dtype is NULL");
  LegacyCacheViews v;
  v.kv_cache_dtype = kv_cache_dtype;
  const KvDType kv = graphattn::kv_cache_dtype_of(v.kv_cache_dtype);
  v.key_cache = view_of(key_cache, "key_cache", Null::kRejected, &kv);
  v.value_cache = view_of(value_cache, "value_cache", Null::kRejected, &kv);
  return v;
}

graphattn_status_t graphattn_paged_attention_v1(
    const DLTensor* out, const DLTensor* query, const DLTensor* key_cache,
    const DLTensor* value_cache, int num_kv_heads, float scale, const DLTensor* block_tables,
    const DLTensor* seq_lens, int block_size, int max_seq_len, const DLTensor* alibi_slopes,
    const char* kv_cache_dtype, float k_scale, float v_scale, int tp_rank,
    int blocksparse_local_blocks, int blocksparse_vert_stride, int blocksparse_block_size,
    int blocksparse_head_sliding_step, void* stream, graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView o = view_of(out, "out");
    const TensorView q = view_of(query, "query");
    const LegacyCacheViews kv = legacy_caches_of(key_cache, value_cache, kv_cache_dtype);
    const TensorView bt = view_of(block_tables, "block_tables");
    const TensorView sl = view_of(seq_lens, "seq_lens");
    const TensorView slopes = view_of(alibi_slopes, "alibi_slopes", Null::kEmpty);
    graphattn::paged_attention_v1(
        o, q, kv.key_cache, kv.value_cache, num_kv_heads, scale, bt, sl, block_size, max_seq_len,
        slopes, kv.kv_cache_dtype, k_scale, v_scale, tp_rank, blocksparse_local_blocks,
        blocksparse_vert_stride, blocksparse_block_size, blocksparse_head_sliding_step,
        static_cast<CUstream>(stream), cache_of(cache));
  });
}

graphattn_status_t graphattn_paged_attention_v2(
    const DLTensor* out, const DLTensor* exp_sums, const DLTensor* max_logits,
    const DLTensor* tmp_out, const DLTensor* query, const DLTensor* key_cache,
    const DLTensor* value_cache, int num_kv_heads, float scale, const DLTensor* block_tables,
    const DLTensor* seq_lens, int block_size, int max_seq_len, const DLTensor* alibi_slopes,
    const char* kv_cache_dtype, float k_scale, float v_scale, int tp_rank,
    int blocksparse_local_blocks, int blocksparse_vert_stride, int blocksparse_block_size,
    int blocksparse_head_sliding_step, void* stream, graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView o = view_of(out, "out");
    const TensorView es = view_of(exp_sums, "exp_sums");
    const TensorView ml = view_of(max_logits, "max_logits");
    const TensorView tmp = view_of(tmp_out, "tmp_out");
    const TensorView q = view_of(query, "query");
    const LegacyCacheViews kv = legacy_caches_of(key_cache, value_cache, kv_cache_dtype);
    const TensorView bt = view_of(block_tables, "block_tables");
    const TensorView sl = view_of(seq_lens, "seq_lens");
    const TensorView slopes = view_of(alibi_slopes, "alibi_slopes", Null::kEmpty);
    graphattn::paged_attention_v2(
        o, es, ml, tmp, q, kv.key_cache, kv.value_cache, num_kv_heads, scale, bt, sl, block_size,
        max_seq_len, slopes, kv.kv_cache_dtype, k_scale, v_scale, tp_rank, blocksparse_local_blocks,
        blocksparse_vert_stride, blocksparse_block_size, blocksparse_head_sliding_step,
        static_cast<CUstream>(stream), cache_of(cache));
  });
}

graphattn_status_t graphattn_use_paged_attention_v1(int64_t max_seq_len, int64_t num_seqs,
                                                    int64_t num_heads, int* use_v1) noexcept {
  return guard([&] {
    if (!use_v1) invalid("use_v1 is NULL");
    *use_v1 = graphattn::use_paged_attention_v1(max_seq_len, num_seqs, num_heads) ? 1 : 0;
  });
}

graphattn_status_t graphattn_encoder_attention(const DLTensor* query, const DLTensor* key,
                                               const DLTensor* value, const DLTensor* output,
                                               const DLTensor* query_start_loc, int max_query_len,
                                               float scale, const DLTensor* alibi_slopes,
                                               const DLTensor* sinks, void* stream,
                                               graphattn_cache_t cache) noexcept {
  return guard([&] {
    // One statement each: the first bad tensor, in argument order, is the one named.
    const TensorView q = view_of(query, "query");
    const TensorView k = view_of(key, "key");
    const TensorView v = view_of(value, "value");
    const TensorView o = view_of(output, "output");
    const TensorView qsl = view_of(query_start_loc, "query_start_loc");
    const float* slopes = floats_of(alibi_slopes, "alibi_slopes");
    const float* sink = floats_of(sinks, "sinks");
    graphattn::encoder_attention(q, k, v, o, qsl, max_query_len, scale,
                                 static_cast<CUstream>(stream), cache_of(cache), slopes, sink);
  });
}

graphattn_status_t graphattn_multi_head_attention(const DLTensor* q, const DLTensor* k,
                                                  const DLTensor* v, const DLTensor* out,
                                                  float scale, void* stream,
                                                  graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView qv = view_of(q, "q");
    const TensorView kv = view_of(k, "k");
    const TensorView vv = view_of(v, "v");
    const TensorView ov = view_of(out, "out");
    graphattn::multi_head_attention(qv, kv, vv, ov, scale, static_cast<CUstream>(stream),
                                    cache_of(cache));
  });
}

/* fp8 scales in device memory */

graphattn_status_t graphattn_calc_kv_scales(const DLTensor* key, const DLTensor* value,
                                            const DLTensor* k_scale, const DLTensor* v_scale,
                                            float k_divisor, float v_divisor, void* stream,
                                            graphattn_cache_t cache) noexcept {
  return guard([&] {
    const TensorView k = view_of(key, "key");
    const TensorView v = view_of(value, "value");
    graphattn::calc_kv_scales(k, v, device_scalar_of(k_scale, "k_scale"),
                              device_scalar_of(v_scale, "v_scale"), k_divisor, v_divisor,
                              static_cast<CUstream>(stream), cache_of(cache));
  });
}

// ---- Block copies

graphattn_status_t graphattn_swap_blocks(const DLTensor* src, const DLTensor* dst,
                                         const int64_t* block_mapping, size_t num_pairs,
                                         void* stream) noexcept {
  return guard([&] {
    const TensorView s = block_cache_of(src, "src", true);
    const TensorView d = block_cache_of(dst, "dst", true);
    graphattn::swap_blocks(s, d, pairs_of(block_mapping, num_pairs), static_cast<CUstream>(stream));
  });
}

graphattn_status_t graphattn_copy_blocks(const DLTensor* const* caches, size_t num_caches,
                                         const int64_t* block_mapping, size_t num_pairs,
                                         void* stream) noexcept {
  return guard([&] {
    if (num_caches > 0) deref(caches, "caches");
    std::vector<TensorView> views;
    for (size_t i = 0; i < num_caches; ++i)
      views.push_back(
          block_cache_of(caches[i], ("caches[" + std::to_string(i) + "]").c_str(), false));
    graphattn::copy_blocks(views, pairs_of(block_mapping, num_pairs),
                           static_cast<CUstream>(stream));
  });
}

// ---- Metadata builder and capture sizes

graphattn_cudagraph_support_t graphattn_cudagraph_support(void) noexcept {
  return static_cast<graphattn_cudagraph_support_t>(
      graphattn::FlashAttentionMetadataBuilder().cudagraph_support());
}

graphattn_status_t graphattn_cudagraph_support_for(
    int decode_query_len, graphattn_cudagraph_support_t* support) noexcept {
  return guard([&] {
    graphattn_cudagraph_support_t& out = deref(support, "support");
    out = static_cast<graphattn_cudagraph_support_t>(
        graphattn::FlashAttentionMetadataBuilder(graphattn::AttentionType::kDecoder, 16,
                                                 decode_query_len)
            .cudagraph_support());
  });
}

graphattn_status_t graphattn_can_run_uniform_decode(const int32_t* query_start_loc, int num_reqs,
                                                    int decode_query_len, int* result) noexcept {
  return guard([&] {
    int& out = deref(result, "result");
    const graphattn::FlashAttentionMetadataBuilder builder(graphattn::AttentionType::kDecoder, 16,
                                                           decode_query_len);
    out = builder.can_run_in_cudagraph(batch_of(query_start_loc, num_reqs)) ? 1 : 0;
  });
}

graphattn_status_t graphattn_can_run_in_cudagraph(const int32_t* query_start_loc, int num_reqs,
                                                  int* result) noexcept {
  return graphattn_can_run_uniform_decode(query_start_loc, num_reqs, 1, result);
}

graphattn_status_t graphattn_split_decodes_and_prefills(
    const int32_t* query_start_loc, int num_reqs, int decode_threshold,
    graphattn_decode_prefill_split_t* split) noexcept {
  return guard([&] {
    graphattn_decode_prefill_split_t& out = deref(split, "split");
    const graphattn::DecodePrefillSplit s = graphattn::split_decodes_and_prefills(
        batch_of(query_start_loc, num_reqs), decode_threshold);
    out.num_decodes = s.num_decodes;
    out.num_prefills = s.num_prefills;
    out.num_decode_tokens = s.num_decode_tokens;
    out.num_prefill_tokens = s.num_prefill_tokens;
  });
}

graphattn_status_t graphattn_uniform_decode_capture_sizes(int max_num_seqs, int decode_query_len,
                                                          int* sizes, size_t capacity,
                                                          size_t* count) noexcept {
  return guard([&] {
    const std::vector<int> all = graphattn::default_capture_sizes(max_num_seqs, decode_query_len);
    copy_array(all.size(), capacity, count, sizes == nullptr, "capture sizes",
               [&](size_t i) { sizes[i] = all[i]; });
  });
}

graphattn_status_t graphattn_default_capture_sizes(int max_num_seqs, int* sizes, size_t capacity,
                                                   size_t* count) noexcept {
  return graphattn_uniform_decode_capture_sizes(max_num_seqs, 1, sizes, capacity, count);
}

graphattn_status_t graphattn_padded_capture_size(const int* sorted_sizes, size_t num_sizes,
                                                 int num_tokens, int* padded) noexcept {
  return guard([&] {
    if (num_sizes > 0) deref(sorted_sizes, "sorted_sizes");
    int& out = deref(padded, "padded");
    out = graphattn::padded_capture_size(std::vector<int>(sorted_sizes, sorted_sizes + num_sizes),
                                         num_tokens);
  });
}

}  // extern "C"

// ---- The helpers capi/*.cpp reach through capi/abi_bridge.hpp

namespace graphattn::capi {

graphattn_status_t guarded(const std::function<void()>& body) noexcept { return guard(body); }

void invalid_argument(const std::string& message) { invalid(message); }

TensorView device_view(const DLTensor* t, const char* name, bool nullable) {
  return view_of(t, name, nullable ? Null::kEmpty : Null::kRejected);
}

TensorView block_cache_view(const DLTensor* t, const char* name) {
  return block_cache_of(t, name, false);
}

KernelCache& kernel_cache_of(graphattn_cache_t cache) { return cache_of(cache); }

}  // namespace graphattn::capi
