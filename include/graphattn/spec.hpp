// AttentionSpec: one compile-time specialization of one kernel. Everything that changes the
// generated code is a field here; everything that does not (lengths, scale, window length,
// soft-cap value, pointers) is a launch argument.
#pragma once

#include <string>
#include <vector>

#include "graphattn/export.h"

namespace graphattn {

enum class KernelKind { kCacheWrite, kDecode, kPrefill };
enum class DType { kFloat16, kBFloat16 };           // query, output and (auto) KV element type
enum class KvDType { kAuto, kFp8E4M3, kFp8E5M2 };   // KV cache element type; auto = DType
enum class KvLayout { kNHD, kHND };                 // order of block_size and num_kv_heads

struct GRAPHATTN_API AttentionSpec {
  KernelKind kind = KernelKind::kDecode;
  int head_size = 128;        // 32..256, multiple of 8
  int block_size = 16;        // tokens per KV page: 16..256, multiple of 16
  DType dtype = DType::kBFloat16;
  KvDType kv_dtype = KvDType::kAuto;
  int group = 1;              // query heads per KV head (GQA): 1..64
  bool sliding_window = false;  // the window length itself is a launch argument
  bool soft_cap = false;        // the cap value itself is a launch argument
  KvLayout layout = KvLayout::kNHD;
  int arch = 90;              // compute capability * 10 + minor, e.g. 80, 89, 90
  // Checked mode (string suffix "_chk"): the kernel compares every block id and slot it reads
  // with the cache's size and reports the first one out of range (AttentionBackend::
  // take_bounds_violation) instead of reading or writing outside the cache. Off: the fast path,
  // whose source and machine code carry no check at all.
  bool check_bounds = false;

  // Throws graphattn::Error naming the first bad field and the allowed values.
  void validate() const;

  // Canonical, stable form, e.g. "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90" (checked
  // mode appends "_chk").
  std::string to_string() const;

  // Parses the canonical form; throws graphattn::Error on anything else. The result is
  // validated, so parse(s).to_string() == s for every accepted s.
  static AttentionSpec parse(const std::string& text);

  bool operator==(const AttentionSpec& o) const;
  bool operator!=(const AttentionSpec& o) const { return !(*this == o); }
};

// Element sizes in bytes.
GRAPHATTN_API int dtype_bytes(DType t);
GRAPHATTN_API int kv_dtype_bytes(KvDType t, DType auto_type);

GRAPHATTN_API const char* to_string(KernelKind k);
GRAPHATTN_API const char* to_string(DType t);     // "fp16" / "bf16"
GRAPHATTN_API const char* to_string(KvDType t);   // "auto" / "e4m3" / "e5m2"
GRAPHATTN_API const char* to_string(KvLayout l);  // "nhd" / "hnd"

// The closed sets that validate() checks against, for messages and for tools.
GRAPHATTN_API const std::vector<int>& supported_head_sizes();
GRAPHATTN_API const std::vector<int>& supported_block_sizes();
GRAPHATTN_API const std::vector<int>& supported_archs();
constexpr int kMaxGroup = 64;

}  // namespace graphattn
