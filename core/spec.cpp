// SPDX-License-Identifier: Apache-2.0
// AttentionSpec: validation, the canonical string and its parser.
#include "graphattn/spec.hpp"

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <type_traits>

#include "core/spec_axes.hpp"
#include "core/text.hpp"
#include "graphattn/error.hpp"

namespace graphattn {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& value,
                       const std::string& allowed) {
  throw Error(what + " " + value + " is not supported; supported: " + allowed);
}

// What a kNumber axis accepts: lo, lo + step, ..., hi, or (step 0) the values of list.
// also: one more value that only some kernels accept (validate() says which), 0 for none.
struct NumberRule {
  int lo, hi, step;
  const int* list;
  int list_size;
  const char* value_prefix;  // printed before the value: "sm_" for the arch
  int also;
  const char* also_note;  // allowed()'s words for it
};

// bf16 arithmetic needs sm_80; CUDA 13's NVRTC targets these.
constexpr int kArchs[] = {80, 86, 87, 89, 90, 100, 103, 110, 120, 121};
constexpr int largest(const int* v, int n) {
  int m = v[0];
  for (int i = 1; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
constexpr int kNumArchs = static_cast<int>(std::size(kArchs));

// The rules the axis list names (GRAPHATTN_SPEC_AXES' rule column).
constexpr NumberRule kHeadSizeRule = {32, 256, 8, nullptr, 0, "", 0, ""};
// 8 (vLLM's PagedAttention default) for the cache writes and the legacy decode only: validate()
// says so per kind.
constexpr NumberRule kBlockSizeRule = {
    16, 256, 16, nullptr, 0, "", kCacheWriteOnlyBlockSize, "cache writes and legacy decode also 8"};
constexpr NumberRule kGroupRule = {1, kMaxGroup, 1, nullptr, 0, "", 0, ""};
constexpr NumberRule kArchRule = {
    kArchs[0], largest(kArchs, kNumArchs), 0, kArchs, kNumArchs, "sm_", 0, ""};
// The legacy key cache's x where it is not 16 bytes of the element (0: 16 bytes); validate()
// refuses the value that is 16 bytes (it is spelled 0) and x for other layouts.
constexpr int kKeyXs[] = {0, 8, 16};
constexpr NumberRule kKeyXRule = {0, 16, 0, kKeyXs, 3, "", 0, ""};
constexpr const NumberRule* kNoRule = nullptr;

std::vector<int> values_of(const NumberRule& r) {
  if (r.list) return std::vector<int>(r.list, r.list + r.list_size);
  std::vector<int> v;
  for (int i = r.lo; i <= r.hi; i += r.step) v.push_back(i);
  return v;
}

bool allows(const NumberRule& r, int v) {
  if (r.also != 0 && v == r.also) return true;
  if (r.list) {
    for (int i = 0; i < r.list_size; ++i)
      if (r.list[i] == v) return true;
    return false;
  }
  return v >= r.lo && v <= r.hi && (v - r.lo) % r.step == 0;
}

// "32, 40, ..., 256 (multiples of 8)", "1..64", "sm_80, sm_86, ...".
std::string allowed(const NumberRule& r) {
  const auto str = [](int v) { return std::to_string(v); };
  if (!r.list && r.step == 1) return str(r.lo) + ".." + str(r.hi);
  const std::string also = r.also != 0 ? std::string("; ") + r.also_note : "";
  if (!r.list)
    return str(r.lo) + ", " + str(r.lo + r.step) + ", ..., " + str(r.hi) + " (multiples of " +
           str(r.step) + also + ")";
  std::string out;
  for (int i = 0; i < r.list_size; ++i)
    out += (i ? ", " : "") + std::string(r.value_prefix) + str(r.list[i]);
  return out;
}

// The kernels an axis belongs to (GRAPHATTN_SPEC_AXES' kernels column), one bit each; a prefill
// over dense K/V is a kernel of its own (it has no paged cache).
enum KernelBit : unsigned {
  kCacheWriteBit = 1,
  kDecodeBit = 2,
  kPrefillBit = 4,
  kKvScaleBit = 8,
  kDensePrefillBit = 16,
  kMergeStatesBit = 32,
  kBlockCopyBit = 64,
};

// A kind's kernel (for a prefill: the one over the paged cache, or with dense_kv the dense-KV
// one); 0 for a kind without a bit, which the static_asserts below refuse at compile time.
constexpr unsigned kernel_bit_of(KernelKind kind, bool dense_kv) {
  switch (kind) {
    case KernelKind::kCacheWrite:
      return kCacheWriteBit;
    case KernelKind::kDecode:
      return kDecodeBit;
    case KernelKind::kPrefill:
      return dense_kv ? kDensePrefillBit : kPrefillBit;
    case KernelKind::kKvScale:
      return kKvScaleBit;
    case KernelKind::kMergeStates:
      return kMergeStatesBit;
    case KernelKind::kBlockCopy:
      return kBlockCopyBit;
  }
  return 0;
}

// Every kernel's bit, OR-ed: from the kinds themselves, so a new kind cannot be left out.
constexpr unsigned all_kernel_bits() {
  unsigned all = 0;
  for (int k = 0; k < enum_count<KernelKind>(); ++k)
    for (bool dense : {false, true}) all |= kernel_bit_of(static_cast<KernelKind>(k), dense);
  return all;
}
// Each kind has a bit of its own: a kind missing from kernel_bit_of() gives 0 (or a bit shared
// with another kind), and the count of bits falls short of the kinds (+1: the dense prefill).
constexpr bool every_kind_has_its_bit() {
  int bits = 0;
  for (unsigned b = all_kernel_bits(); b != 0; b &= b - 1) ++bits;
  for (int k = 0; k < enum_count<KernelKind>(); ++k)
    if (kernel_bit_of(static_cast<KernelKind>(k), false) == 0) return false;
  return bits == enum_count<KernelKind>() + 1;
}
static_assert(every_kind_has_its_bit(),
              "a KernelKind without a KernelBit of its own: add it to KernelBit and "
              "kernel_bit_of() (and its message to lacks())");

constexpr unsigned kAnyKernel = all_kernel_bits();
// Every kernel but merge_states and block_copy, which no layer configuration describes.
constexpr unsigned kLayerKernels = kAnyKernel & ~(kMergeStatesBit | kBlockCopyBit);
constexpr unsigned kDTypeKernels = kLayerKernels | kMergeStatesBit;
constexpr unsigned kPagedKernels = kCacheWriteBit | kDecodeBit | kPrefillBit;
constexpr unsigned kAttentionKernels = kDecodeBit | kPrefillBit | kDensePrefillBit;
constexpr unsigned kPagedAttention = kDecodeBit | kPrefillBit;
constexpr unsigned kDecodeKernel = kDecodeBit;
constexpr unsigned kPrefillKernels = kPrefillBit | kDensePrefillBit;
constexpr unsigned kCacheWriteKernel = kCacheWriteBit;

unsigned kernel_bit(const AttentionSpec& s) { return kernel_bit_of(s.kind, s.dense_kv); }

// How validate() says that a kernel lacks an axis; "<label> (<value>)" follows.
const char* lacks(unsigned kernel) {
  switch (kernel) {
    case kCacheWriteBit:
      return "the cache write kernel does not depend on ";
    case kDecodeBit:
      return "the decode kernel does not depend on ";
    case kPrefillBit:
      return "the prefill kernel does not depend on ";
    case kKvScaleBit:
      return "the kv_scale kernel depends only on the head size, dtype and arch, not on ";
    case kMergeStatesBit:
      return "the merge_states kernel depends only on the dtype and the arch, not on ";
    case kBlockCopyBit:
      return "the block_copy kernel depends only on the arch, not on ";
    default:
      return "dense KV (_dense) reads no paged cache: the dense-KV prefill kernel does not "
             "depend on ";
  }
}

}  // namespace

const std::vector<int>& supported_head_sizes() {
  static const std::vector<int> v = values_of(kHeadSizeRule);
  return v;
}
const std::vector<int>& supported_block_sizes() {
  static const std::vector<int> v = values_of(kBlockSizeRule);
  return v;
}
const std::vector<int>& supported_archs() {
  static const std::vector<int> v = values_of(kArchRule);
  return v;
}

int dtype_bytes(DType t) { return t == DType::kFloat32 ? 4 : 2; }
int kv_dtype_bytes(KvDType t, DType auto_type) {
  return t == KvDType::kAuto ? dtype_bytes(auto_type) : 1;
}

namespace {

// The names of a kName axis's values, index = the enum's value (spec.hpp's enum lists; an enum
// axis without a list there does not compile).
using Names = std::vector<const char*>;
template <typename E>
const Names& axis_names() {
  static const Names names(std::begin(EnumNames<E>::spec_names),
                           std::end(EnumNames<E>::spec_names));
  return names;
}
// Axes of other types have no names.
template <typename T>
const Names* names_of() {
  if constexpr (std::is_enum_v<T>) {
    return &axis_names<T>();
  } else {
    return nullptr;
  }
}

template <typename E>
const char* name_of(E v) {
  const Names& n = axis_names<E>();
  const int i = static_cast<int>(v);
  return i >= 0 && i < static_cast<int>(n.size()) ? n[i] : "?";
}

enum class Form { kName, kNumber, kFlag, kSuffix, kOptNumber };

// One axis of GRAPHATTN_SPEC_AXES, with its field reached as an int.
struct Axis {
  Form form;
  const char* tag;
  const char* label;
  int radix;
  const char* constant;
  unsigned kernels;        // the kernels that have it (KernelBit)
  int canonical;           // its value in every other kernel's spec
  const Names* names;      // kName
  const NumberRule* rule;  // kNumber, kOptNumber
  int (*get)(const AttentionSpec&);
  void (*set)(AttentionSpec&, int);
};

// The largest value an axis allows: its radix must exceed it, or the value could not be packed
// into the memory tier's key (and would take the slow path every time).
template <typename T>
constexpr int largest_allowed(Form form, const NumberRule* rule) {
  if constexpr (std::is_enum_v<T>) {
    return enum_count<T>() - 1;
  } else {
    return form == Form::kNumber || form == Form::kOptNumber ? (rule ? rule->hi : 0) : 1;
  }
}

#define GRAPHATTN_SPEC_CHECK(type, field, default_value, form, tag, label, radix, constant,   \
                             kernels, canonical, rule)                                        \
  static_assert(                                                                              \
      (Form::form == Form::kNumber || Form::form == Form::kOptNumber) == ((rule) != nullptr), \
      "spec axis " #field ": a number axis names its NumberRule, the others kNoRule");        \
  static_assert(Form::form != Form::kOptNumber ||                                             \
                    static_cast<int>(default_value) == static_cast<int>(canonical),           \
                "spec axis " #field ": an optional number's default is its canonical value"); \
  static_assert(largest_allowed<type>(Form::form, rule) < (radix),                            \
                "spec axis " #field ": the radix does not cover every allowed value");        \
  static_assert(static_cast<int>(canonical) >= 0 && static_cast<int>(canonical) < (radix) &&  \
                    static_cast<int>(default_value) >= 0 &&                                   \
                    static_cast<int>(default_value) < (radix),                                \
                "spec axis " #field ": the canonical and default values must pack");          \
  static_assert((kernels) != 0 && ((kernels) & ~kAnyKernel) == 0,                             \
                "spec axis " #field ": kernels is a set of KernelBit");
GRAPHATTN_SPEC_AXES(GRAPHATTN_SPEC_CHECK)
#undef GRAPHATTN_SPEC_CHECK

#define GRAPHATTN_SPEC_AXIS(type, field, default_value, form, tag, label, radix, constant, \
                            kernels, canonical, rule)                                      \
  Axis{Form::form,                                                                         \
       tag,                                                                                \
       label,                                                                              \
       radix,                                                                              \
       constant,                                                                           \
       kernels,                                                                            \
       static_cast<int>(canonical),                                                        \
       names_of<type>(),                                                                   \
       rule,                                                                               \
       [](const AttentionSpec& s) { return static_cast<int>(s.field); },                   \
       [](AttentionSpec& s, int v) { s.field = static_cast<type>(v); }},

const std::vector<Axis>& axes() {
  static const std::vector<Axis> a = {GRAPHATTN_SPEC_AXES(GRAPHATTN_SPEC_AXIS)};
  return a;
}
#undef GRAPHATTN_SPEC_AXIS

// Bits of one digit of radix r (ceil(log2 r)): their sum bounds the packed key's width.
constexpr int ceil_log2(int r) {
  int b = 0;
  while ((1 << b) < r) ++b;
  return b;
}

// The packed key's digits must fit in 63 bits under its leading 1.
constexpr double packed_bits() {
  double bits = 0;
#define GRAPHATTN_SPEC_RADIX(type, field, default_value, form, tag, label, radix, ...) \
  bits += ceil_log2(radix);
  GRAPHATTN_SPEC_AXES(GRAPHATTN_SPEC_RADIX)
#undef GRAPHATTN_SPEC_RADIX
  return bits;
}
static_assert(packed_bits() <= 63, "the spec's axes no longer fit the memory tier's 64-bit key");

// An axis's value as the spec string writes it, without the leading '_': "g4", "kve4m3", "mt"
// ("no _mt" for an unset suffix).
std::string written(const Axis& a, int v) {
  std::string tag = a.tag[0] == '_' ? a.tag + 1 : a.tag;
  switch (a.form) {
    case Form::kName:
      return tag + (v >= 0 && v < static_cast<int>(a.names->size()) ? (*a.names)[v] : "?");
    case Form::kNumber:
    case Form::kFlag:
      return tag + std::to_string(v);
    case Form::kSuffix:
      return v ? tag : "no " + std::string(a.tag);
    case Form::kOptNumber:
      return v != a.canonical ? tag + std::to_string(v) : "no " + std::string(a.tag);
  }
  return tag;
}

std::string allowed_names(const Names& n) {
  std::string out;
  for (const char* x : n) out += (out.empty() ? "" : ", ") + std::string(x);
  return out;
}

}  // namespace

const char* to_string(KernelKind k) { return name_of(k); }
const char* to_string(DType t) { return name_of(t); }
const char* to_string(KvDType t) { return name_of(t); }
const char* to_string(KvLayout l) { return name_of(l); }
const char* to_string(AttentionType t) {
  const char* name = enum_long_name<AttentionType>(static_cast<int>(t));
  return name ? name : "?";
}

const char* kv_cache_dtype_name(KvDType t) {
  const char* name = enum_long_name<KvDType>(static_cast<int>(t));
  return name ? name : "?";
}

KvDType kv_cache_dtype_of(const std::string& name) {
  std::string allowed;
  for (int i = 0; i < enum_count<KvDType>(); ++i) {
    if (name == enum_long_name<KvDType>(i)) return static_cast<KvDType>(i);
    if (static_cast<KvDType>(i) == KvDType::kFp8E4M3) allowed += ", fp8";
    allowed += std::string(i ? ", " : "") + enum_long_name<KvDType>(i);
  }
  if (name == "fp8") return KvDType::kFp8E4M3;  // vLLM's name of e4m3 on CUDA
  throw Error("kv_cache_dtype \"" + name + "\" is not supported; supported: " + allowed);
}

void AttentionSpec::validate() const {
  for (const Axis& a : axes()) {
    const int v = a.get(*this);
    if (a.form == Form::kName && (v < 0 || v >= static_cast<int>(a.names->size())))
      fail(a.label, std::to_string(v), allowed_names(*a.names));
    if ((a.form == Form::kNumber || a.form == Form::kOptNumber) && !allows(*a.rule, v))
      fail(a.label, a.rule->value_prefix + std::to_string(v), allowed(*a.rule));
  }
  // float32 is the cache writes', merge_states' and the legacy decode's (a CUDA-core fp32
  // kernel, templates/decode_f32.cu); the other attention kernels' MMA tiles are 16-bit.
  // Block size 8 is the cache writes' and the legacy decode's (16-bit and fp32 caches: a
  // 16-token key tile spans two blocks; fp8 value units of 16 tokens would not); the other
  // attention kernels' key tiles are 16 tokens (a multiple of the block).
  const bool legacy_decode = kind == KernelKind::kDecode && layout == KvLayout::kLegacy;
  const bool f32_kind =
      kind == KernelKind::kCacheWrite || kind == KernelKind::kMergeStates || legacy_decode;
  if (dtype == DType::kFloat32 && !f32_kind)
    throw Error("spec " + to_string() + ": dtype fp32 is not supported by the " + name_of(kind) +
                (kind == KernelKind::kDecode
                     ? " kernel with the " + std::string(name_of(layout)) + " layout"
                     : std::string(" kernel")) +
                "; supported: fp16, bf16 (fp32: cache_write, merge_states and decode with the "
                "legacy layout)");
  if (dtype == DType::kFloat32 && legacy_decode &&
      (kv_dtype != KvDType::kAuto || multi_token || block_sparse || check_bounds))
    throw Error("spec " + to_string() +
                ": the fp32 legacy decode kernel takes KV cache dtype auto (fp32), one query "
                "token, dense attention and no checked mode; supported: kvauto without _mt, "
                "_bsp, _chk (window, soft cap, ALiBi and sinks are)");
  if (block_size == kCacheWriteOnlyBlockSize && kind != KernelKind::kCacheWrite &&
      !(legacy_decode && kv_dtype == KvDType::kAuto))
    throw Error("spec " + to_string() + ": block size 8 is not supported by the " + name_of(kind) +
                (kind == KernelKind::kDecode ? " kernel with the " + std::string(name_of(layout)) +
                                                   " layout and KV cache dtype " + name_of(kv_dtype)
                                             : std::string(" kernel")) +
                "; supported: 16, 32, ..., 256 (multiples of 16; 8: cache_write, and decode with "
                "the legacy layout and KV cache dtype auto)");
  // An axis its kernel does not have holds its canonical value, so that one kernel serves every
  // layer that differs only there.
  const unsigned kernel = kernel_bit(*this);
  for (const Axis& a : axes())
    if (!(a.kernels & kernel) && a.get(*this) != a.canonical)
      throw Error("spec " + to_string() + ": " + lacks(kernel) + a.label + " (" +
                  written(a, a.get(*this)) + "); use " + written(a, a.canonical) + ", e.g. " +
                  for_kernel(kind).to_string());
  if (non_causal && sliding_window)
    throw Error("spec " + to_string() +
                ": non-causal (_nc) attention with a sliding window (swa1) is not supported; "
                "supported: swa0 with _nc");
  // vLLM's block-sparse attention is causal self-attention over the paged cache.
  if (block_sparse && non_causal)
    throw Error("spec " + to_string() +
                ": block-sparse (_bsp) is an axis of causal paged decode and prefill kernels; "
                "not with _nc");
  // fp8 queries meet fp8 keys in one fp8 MMA (e4m3 x e4m3 or e4m3 x e5m2): a 16-bit cache would
  // need the keys narrowed or the query widened on every tile, which gains nothing over a 16-bit
  // query (vLLM quantizes queries only for fp8 caches, FA3's fp8 forward takes fp8 K and V).
  if (q_fp8 && kv_dtype == KvDType::kAuto)
    throw Error("spec " + to_string() +
                ": an e4m3 query (_qe4m3) needs an fp8 KV cache dtype; supported: kve4m3, "
                "kve5m2 with _qe4m3");
  // The mixed graph's decode counts one-token decodes in query_start_loc (flash caches, a 16-bit
  // query's parameter block).
  if (device_splits && (multi_token || q_fp8 || layout == KvLayout::kLegacy))
    throw Error("spec " + to_string() +
                ": device-chosen splits (_dsp) are an axis of one-token decodes over the flash "
                "layout with a 16-bit query; not with _mt, _qe4m3 or the legacy layout");
  // The long-splits count is a choice of the _dsp kernel's count (16-bit KV: the seq_lens window
  // it reads the decodes' lengths from).
  if (dsp_long_splits && (!device_splits || kv_dtype != KvDType::kAuto))
    throw Error("spec " + to_string() +
                ": long device splits (_long) are an axis of _dsp decodes over a 16-bit KV "
                "cache; supported: _long with _dsp and kvauto");
  // The legacy key cache splits the head into chunks of x = 16 bytes of elements.
  if (layout == KvLayout::kLegacy && head_size % (kv_dtype == KvDType::kAuto ? 8 : 16) != 0)
    throw Error(
        "spec " + to_string() + ": head size " + std::to_string(head_size) +
        " is not supported by the legacy layout with KV cache dtype " + name_of(kv_dtype) +
        "; supported: multiples of " +
        (kv_dtype == KvDType::kAuto ? "8 (x = 8 16-bit elements)" : "16 (x = 16 fp8 elements)"));
  if (key_x != 0) {
    // The legacy key cache's x in elements, where it is not 16 bytes of them.
    const int kv_bytes = kv_dtype_bytes(kv_dtype, dtype);
    if (layout != KvLayout::kLegacy)
      throw Error("spec " + to_string() + ": legacy key cache x (_x" + std::to_string(key_x) +
                  ") is an axis of vLLM's legacy key cache; supported: _x with layout legacy "
                  "only");
    if (key_x * kv_bytes == 16)
      throw Error("spec " + to_string() + ": legacy key cache x " + std::to_string(key_x) +
                  " is 16 bytes of " + std::to_string(kv_bytes) +
                  "-byte elements, the canonical x, which the spec leaves out; supported: _x" +
                  (kv_bytes == 1   ? "8"
                   : kv_bytes == 2 ? "16"
                                   : "8, _x16") +
                  " or no _x");
    if (head_size % key_x != 0)
      throw Error("spec " + to_string() + ": head size " + std::to_string(head_size) +
                  " is not supported by a legacy key cache with x = " + std::to_string(key_x) +
                  "; supported: multiples of " + std::to_string(key_x));
  }
  if (interleaved_v) {
    // vLLM's interleaved V: tokens in groups of kx = 16 bytes of cache elements.
    const int kx = 16 / (kv_dtype != KvDType::kAuto ? 1 : dtype == DType::kFloat32 ? 4 : 2);
    if (layout != KvLayout::kLegacy)
      throw Error("spec " + to_string() +
                  ": the interleaved V cache (_iv) is a layout of vLLM's legacy value cache; "
                  "supported: _iv with layout legacy only");
    if (block_size % kx != 0)
      throw Error("spec " + to_string() + ": block size " + std::to_string(block_size) +
                  " is not supported by the interleaved V cache of " + std::to_string(16 / kx) +
                  "-byte elements; supported: multiples of kx = " + std::to_string(kx) +
                  " (16 bytes of elements)");
  }
}

AttentionSpec AttentionSpec::for_kernel(KernelKind k) const {
  AttentionSpec s = *this;
  s.kind = k;
  const unsigned kernel = kernel_bit(s);
  for (const Axis& a : axes())
    if (!(a.kernels & kernel)) a.set(s, a.canonical);
  return s;
}

std::string AttentionSpec::to_string() const {
  std::string out;
  for (const Axis& a : axes()) {
    const int v = a.get(*this);
    switch (a.form) {
      case Form::kName:
        out += a.tag;
        out += v >= 0 && v < static_cast<int>(a.names->size()) ? (*a.names)[v] : "?";
        break;
      case Form::kNumber:
      case Form::kFlag:
        out += a.tag + std::to_string(v);
        break;
      case Form::kSuffix:
        if (v) out += a.tag;
        break;
      case Form::kOptNumber:
        if (v != a.canonical) out += a.tag + std::to_string(v);
        break;
    }
  }
  return out;
}

bool AttentionSpec::operator==(const AttentionSpec& o) const {
  for (const Axis& a : axes())
    if (a.get(*this) != a.get(o)) return false;
  return true;
}

namespace detail {

uint64_t packed_spec(const AttentionSpec& s) {
  uint64_t v = 1;
  for (const Axis& a : axes()) {
    const int x = a.get(s);
    if (x < 0 || x >= a.radix) return 0;
    v = v * static_cast<uint64_t>(a.radix) + static_cast<uint64_t>(x);
  }
  return v;
}

std::string spec_constants(const AttentionSpec& s) {
  std::string out;
  for (const Axis& a : axes()) {
    if (!*a.constant) continue;
    const int v = a.get(s);
    if (a.form == Form::kSuffix) {
      // Only set ones are named, so that a mode's off state renders the same source as before
      // the mode existed.
      if (v) out += std::string("#define ") + a.constant + " 1\n";
    } else if (a.form == Form::kOptNumber) {
      if (v != a.canonical)
        out += std::string("#define ") + a.constant + " " + std::to_string(v) + "\n";
    } else {
      out += std::string("constexpr int ") + a.constant + " = " + std::to_string(v) + ";\n";
    }
  }
  return out;
}

}  // namespace detail

namespace {

enum class Number { kOk, kNone, kLeadingZero, kTooLong };

// Reads a run of decimal digits (no sign, no leading zero unless the number is 0, at most 6).
Number take_number(const std::string& s, size_t& pos, int& out) {
  size_t end = pos;
  while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
  if (end == pos) return Number::kNone;
  if (end - pos > 6) return Number::kTooLong;
  if (s[pos] == '0' && end - pos > 1) return Number::kLeadingZero;
  out = std::atoi(s.substr(pos, end - pos).c_str());
  pos = end;
  return Number::kOk;
}

bool take_literal(const std::string& s, size_t& pos, const std::string& lit) {
  if (s.compare(pos, lit.size(), lit) != 0) return false;
  pos += lit.size();
  return true;
}

// "<cache_write|decode|prefill>_h<head size>_b<block size>..." from the axis list.
std::string grammar() {
  std::string g;
  for (const Axis& a : axes()) {
    switch (a.form) {
      case Form::kName: {
        std::string alts;
        for (const char* n : *a.names) alts += (alts.empty() ? "" : "|") + std::string(n);
        g += a.tag + ("<" + alts + ">");
        break;
      }
      case Form::kNumber:
        g += a.tag + ("<" + std::string(a.label) + ">");
        break;
      case Form::kFlag:
        g += a.tag + std::string("<0|1>");
        break;
      case Form::kSuffix:
        g += "[" + std::string(a.tag) + "]";
        break;
      case Form::kOptNumber:
        g += "[" + std::string(a.tag) + "<" + a.label + ">]";
        break;
    }
  }
  return g;
}

}  // namespace

AttentionSpec AttentionSpec::parse(const std::string& text) {
  auto bad = [&](const std::string& why) -> Error {
    return Error("malformed spec string '" + detail::printable(text) + "': " + why + "; expected " +
                 grammar() + ", e.g. decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
  };
  AttentionSpec s;
  size_t pos = 0;
  // What the parser found where it stopped, for the message.
  auto found = [&](size_t at) {
    return at >= text.size() ? std::string("the end of the string")
                             : "'" + detail::printable(text.substr(at), 24) + "'";
  };
  auto missing = [&](const std::string& field, const std::string& want) {
    return bad(field + " field missing: expected " + want + " at offset " + std::to_string(pos) +
               ", found " + found(pos));
  };
  for (const Axis& a : axes()) {
    const std::string label(a.label), tag(a.tag);
    switch (a.form) {
      case Form::kName: {
        // Longest name first, so that no name is taken for a prefix of another.
        int hit = -1;
        for (int i = 0; i < static_cast<int>(a.names->size()); ++i) {
          const std::string n = tag + (*a.names)[i];
          if (text.compare(pos, n.size(), n) == 0 &&
              (hit < 0 || n.size() > std::string((*a.names)[hit]).size() + tag.size()))
            hit = i;
        }
        if (hit < 0) {
          if (pos == 0) throw bad("unknown " + label + ": found " + found(0));
          std::string want;
          const Names& n = *a.names;
          for (size_t i = 0; i < n.size(); ++i)
            want += (i == 0 ? "" : i + 1 == n.size() ? " or " : ", ") + tag + n[i];
          throw missing(label, want);
        }
        pos += tag.size() + std::string((*a.names)[hit]).size();
        a.set(s, hit);
        break;
      }
      case Form::kNumber:
      case Form::kFlag:
      case Form::kOptNumber: {
        if (!take_literal(text, pos, tag)) {
          if (a.form != Form::kOptNumber) throw missing(label, "'" + tag + "<number>'");
          a.set(s, a.canonical);  // not named: the canonical value
          break;
        }
        const size_t at = pos;
        int v = 0;
        switch (take_number(text, pos, v)) {
          case Number::kOk:
            break;
          case Number::kNone:
            throw bad(label + " field '" + tag + "' has no number: found " + found(at));
          case Number::kLeadingZero:
            throw bad(label + " field '" + tag + "' has a number with a leading zero: found " +
                      found(at));
          case Number::kTooLong:
            throw bad(label + " field '" + tag + "' has a number of more than 6 digits: found " +
                      found(at));
        }
        if (a.form == Form::kFlag && v > 1)
          throw bad(label + " field '" + tag + "' must be 0 or 1, found " + std::to_string(v));
        if (a.form == Form::kOptNumber && v == a.canonical)
          throw bad(label + " field '" + tag + std::to_string(v) +
                    "' names the canonical value, which the canonical form leaves out");
        a.set(s, v);
        break;
      }
      case Form::kSuffix:
        a.set(s, take_literal(text, pos, tag) ? 1 : 0);
        break;
    }
  }
  if (pos != text.size()) throw bad("trailing characters " + found(pos));
  s.validate();
  return s;
}

}  // namespace graphattn
