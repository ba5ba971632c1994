// SPDX-License-Identifier: Apache-2.0
// The C ABI's library section: versions, errors, devices, and the name enumerators that give a
// binding the C++ API's name tables (spec.hpp) instead of its own copies.
#include <iterator>
#include <string>

#include "capi.hpp"
#include "graphattn/log.hpp"
#include "graphattn/metadata.hpp"
#include "graphattn/runtime.hpp"

#ifndef GRAPHATTN_VERSION
#error "GRAPHATTN_VERSION (the project version) must be defined by the build"
#endif

namespace graphattn::capi {

thread_local std::string last_error;

void invalid(const std::string& message) {
  throw StatusError(GRAPHATTN_ERROR_INVALID_ARGUMENT, message);
}

graphattn_status_t fail(graphattn_status_t status, const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();  // no memory for the message: the status still says what happened
  }
  return status;
}

namespace {

std::string compile_message(const CompileError& e) {
  std::string m = e.what();
  m += "\nNVRTC options:";
  for (const std::string& o : e.options()) m += " " + o;
  m += "\n(GRAPHATTN_DUMP_SOURCE=1 writes the numbered source beside the cache entry)";
  return m;
}

}  // namespace

graphattn_status_t fail_current() noexcept {
  try {
    throw;
  } catch (const StatusError& e) {
    return fail(e.status, e.what());
  } catch (const CompileError& e) {
    try {
      return fail(GRAPHATTN_ERROR_COMPILE, compile_message(e).c_str());
    } catch (...) {
      return fail(GRAPHATTN_ERROR_COMPILE, e.what());
    }
  } catch (const Error& e) {
    return fail(GRAPHATTN_ERROR, e.what());
  } catch (const std::bad_alloc&) {
    return fail(GRAPHATTN_ERROR_OUT_OF_MEMORY, "graphattn: out of host memory");
  } catch (const std::exception& e) {
    return fail(GRAPHATTN_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(GRAPHATTN_ERROR_INTERNAL, "graphattn: unknown exception (a bug: please report it)");
  }
}

KernelCache& cache_of(graphattn_cache_t cache) {
  return cache ? *cache->cache : default_kernel_cache();
}

// The C enums are the C++ enums' values, so conversions are casts once the range is checked:
// each C enum's first and last value against the C++ enum, whose count comes from its name list.
#define GRAPHATTN_SAME_ENUM(first, last, E, cpp_first)                                  \
  static_assert(first == static_cast<int>(E::cpp_first) && last + 1 == enum_count<E>(), \
                #E " and its C enum hold the same values");
GRAPHATTN_SAME_ENUM(GRAPHATTN_DTYPE_FLOAT16, GRAPHATTN_DTYPE_FLOAT32, DType, kFloat16)
GRAPHATTN_SAME_ENUM(GRAPHATTN_KV_DTYPE_AUTO, GRAPHATTN_KV_DTYPE_FP8_E5M2, KvDType, kAuto)
GRAPHATTN_SAME_ENUM(GRAPHATTN_ATTN_DECODER, GRAPHATTN_ATTN_ENCODER_DECODER, AttentionType, kDecoder)
#undef GRAPHATTN_SAME_ENUM
static_assert(GRAPHATTN_DTYPE_BFLOAT16 == static_cast<int>(DType::kBFloat16) &&
              GRAPHATTN_DTYPE_FLOAT32 == static_cast<int>(DType::kFloat32) &&
              GRAPHATTN_KV_DTYPE_FP8_E4M3 == static_cast<int>(KvDType::kFp8E4M3) &&
              GRAPHATTN_KV_DTYPE_FP8_E5M2 == static_cast<int>(KvDType::kFp8E5M2) &&
              GRAPHATTN_ATTN_ENCODER == static_cast<int>(AttentionType::kEncoder) &&
              GRAPHATTN_ATTN_ENCODER_ONLY == static_cast<int>(AttentionType::kEncoderOnly) &&
              GRAPHATTN_ATTN_ENCODER_DECODER == static_cast<int>(AttentionType::kEncoderDecoder));
// A layer's layout is NHD or HND: graphattn_kv_layout_t is KvLayout without the legacy caches.
static_assert(GRAPHATTN_KV_LAYOUT_NHD == static_cast<int>(KvLayout::kNHD) &&
              GRAPHATTN_KV_LAYOUT_HND == static_cast<int>(KvLayout::kHND) &&
              GRAPHATTN_KV_LAYOUT_HND + 2 == enum_count<KvLayout>() &&
              kCKvLayouts == GRAPHATTN_KV_LAYOUT_HND + 1);
static_assert(GRAPHATTN_ORIGIN_MEMORY == static_cast<int>(CacheOrigin::kMemory) &&
              GRAPHATTN_ORIGIN_DISK == static_cast<int>(CacheOrigin::kDisk) &&
              GRAPHATTN_ORIGIN_COMPILED == static_cast<int>(CacheOrigin::kCompiled) &&
              GRAPHATTN_ORIGIN_REMOTE == static_cast<int>(CacheOrigin::kRemote));
static_assert(GRAPHATTN_CUDAGRAPH_NEVER == static_cast<int>(CudaGraphSupport::kNever) &&
              GRAPHATTN_CUDAGRAPH_UNIFORM_SINGLE_TOKEN_DECODE ==
                  static_cast<int>(CudaGraphSupport::kUniformSingleTokenDecode) &&
              GRAPHATTN_CUDAGRAPH_UNIFORM_BATCH ==
                  static_cast<int>(CudaGraphSupport::kUniformBatch) &&
              GRAPHATTN_CUDAGRAPH_ALWAYS == static_cast<int>(CudaGraphSupport::kAlways));
static_assert(GRAPHATTN_BOUNDS_NONE == static_cast<int>(BoundsViolation::Kind::kNone) &&
              GRAPHATTN_BOUNDS_BLOCK_ID == static_cast<int>(BoundsViolation::Kind::kBlockId) &&
              GRAPHATTN_BOUNDS_SLOT == static_cast<int>(BoundsViolation::Kind::kSlot));

}  // namespace graphattn::capi

using namespace graphattn::capi;

extern "C" {

int graphattn_abi_version(void) noexcept { return GRAPHATTN_ABI_VERSION; }

const char* graphattn_version(void) noexcept { return GRAPHATTN_VERSION; }

const char* graphattn_last_error(void) noexcept { return last_error.c_str(); }

void graphattn_set_log_handler(graphattn_log_handler_t handler, void* user) noexcept {
  try {
    if (!handler) {
      graphattn::set_log_handler(nullptr);
      return;
    }
    graphattn::set_log_handler([handler, user](graphattn::LogLevel level, const std::string& m) {
      handler(static_cast<int>(level), m.c_str(), user);
    });
  } catch (...) {  // std::function's allocation: keep the handler there was
  }
}

int graphattn_log_level(void) noexcept { return static_cast<int>(graphattn::log_level()); }

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

const char* graphattn_dtype_name(int value) noexcept {
  return graphattn::enum_long_name<graphattn::DType>(value);
}

const char* graphattn_kv_dtype_name(int value) noexcept {
  return graphattn::enum_long_name<graphattn::KvDType>(value);
}

const char* graphattn_kv_layout_name(int value) noexcept {
  return value < kCKvLayouts ? graphattn::enum_long_name<graphattn::KvLayout>(value) : nullptr;
}

const char* graphattn_attn_type_name(int value) noexcept {
  return graphattn::enum_long_name<graphattn::AttentionType>(value);
}

const char* graphattn_mixed_branches_name(int value) noexcept {
  constexpr int n = static_cast<int>(std::size(graphattn::kMixedBranchesModes));
  return value >= 0 && value < n
             ? graphattn::mixed_branches_name(graphattn::kMixedBranchesModes[value])
             : nullptr;
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

}  // extern "C"
