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

std::vector<int> range_step(int lo, int hi, int step) {
  std::vector<int> v;
  for (int i = lo; i <= hi; i += step) v.push_back(i);
  return v;
}

bool contains(const std::vector<int>& v, int x) {
  for (int y : v)
    if (y == x) return true;
  return false;
}

[[noreturn]] void fail(const std::string& what, const std::string& value,
                       const std::string& allowed) {
  throw Error(what + " " + value + " is not supported; supported: " + allowed);
}

}  // namespace

const std::vector<int>& supported_head_sizes() {
  static const std::vector<int> v = range_step(32, 256, 8);
  return v;
}
const std::vector<int>& supported_block_sizes() {
  static const std::vector<int> v = range_step(16, 256, 16);
  return v;
}
const std::vector<int>& supported_archs() {
  // bf16 arithmetic needs sm_80; CUDA 13's NVRTC targets these.
  static const std::vector<int> v = {80, 86, 87, 89, 90, 100, 103, 110, 120, 121};
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

// What a kNumber axis accepts, for validate() and its message.
struct NumberRule {
  bool (*ok)(int);
  std::string (*allowed)();
  const char* value_prefix;  // printed before the value: "sm_" for the arch
};

std::string join_archs() {
  std::string allowed;
  for (int a : supported_archs())
    allowed += (allowed.empty() ? "sm_" : ", sm_") + std::to_string(a);
  return allowed;
}

const NumberRule* rule_of(const char* field) {
  static const NumberRule head = {[](int v) { return contains(supported_head_sizes(), v); },
                                  [] { return std::string("32, 40, ..., 256 (multiples of 8)"); },
                                  ""};
  // 8 (vLLM's PagedAttention default) for the cache writes only: validate() says so per kind.
  static const NumberRule block = {
      [](int v) { return v == kCacheWriteOnlyBlockSize || contains(supported_block_sizes(), v); },
      [] { return std::string("16, 32, ..., 256 (multiples of 16; cache writes also 8)"); }, ""};
  static const NumberRule group = {[](int v) { return v >= 1 && v <= kMaxGroup; },
                                   [] { return "1.." + std::to_string(kMaxGroup); }, ""};
  static const NumberRule arch = {[](int v) { return contains(supported_archs(), v); }, join_archs,
                                  "sm_"};
  const std::string f(field);
  if (f == "head_size") return &head;
  if (f == "block_size") return &block;
  if (f == "group") return &group;
  if (f == "arch") return &arch;
  return nullptr;
}

enum class Form { kName, kNumber, kFlag, kSuffix };

// One axis of GRAPHATTN_SPEC_AXES, with its field reached as an int.
struct Axis {
  Form form;
  const char* tag;
  const char* label;
  int radix;
  const char* constant;
  const Names* names;      // kName
  const NumberRule* rule;  // kNumber
  int (*get)(const AttentionSpec&);
  void (*set)(AttentionSpec&, int);
};

#define GRAPHATTN_SPEC_AXIS(type, field, default_value, form, tag, label, radix, constant) \
  Axis{Form::form,                                                                         \
       tag,                                                                                \
       label,                                                                              \
       radix,                                                                              \
       constant,                                                                           \
       names_of<type>(),                                                                   \
       Form::form == Form::kNumber ? rule_of(#field) : nullptr,                            \
       [](const AttentionSpec& s) { return static_cast<int>(s.field); },                   \
       [](AttentionSpec& s, int v) { s.field = static_cast<type>(v); }},

const std::vector<Axis>& axes() {
  static const std::vector<Axis> a = {GRAPHATTN_SPEC_AXES(GRAPHATTN_SPEC_AXIS)};
  return a;
}
#undef GRAPHATTN_SPEC_AXIS

// The packed key's digits must fit in 63 bits under its leading 1.
constexpr double packed_bits() {
  double bits = 0;
#define GRAPHATTN_SPEC_RADIX(type, field, default_value, form, tag, label, radix, constant) \
  bits += radix <= 2     ? 1                                                                \
          : radix <= 4   ? 2                                                                \
          : radix <= 8   ? 3                                                                \
          : radix <= 128 ? 7                                                                \
          : radix <= 512 ? 9                                                                \
                         : 10;
  GRAPHATTN_SPEC_AXES(GRAPHATTN_SPEC_RADIX)
#undef GRAPHATTN_SPEC_RADIX
  return bits;
}
static_assert(packed_bits() <= 63, "the spec's axes no longer fit the memory tier's 64-bit key");

std::string allowed_names(const Names& n) {
  std::string out;
  for (const char* x : n) out += (out.empty() ? "" : ", ") + std::string(x);
  return out;
}

// The kinds whose spec holds only the dtype and the arch (merge_states) or only the arch
// (block_copy): every other axis at its default, so one kernel serves every caller.
bool canonical_apart_from_dtype(const AttentionSpec& s) {
  const AttentionSpec d;
  AttentionSpec t = s;
  t.dtype = d.dtype;
  t.arch = d.arch;
  t.kind = d.kind;
  return t == d;
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
    if (a.form == Form::kNumber && !a.rule->ok(v))
      fail(a.label, a.rule->value_prefix + std::to_string(v), a.rule->allowed());
  }
  // float32 and block size 8 are the cache writes' (and merge_states' float32); the attention
  // kernels' MMA tiles are 16-bit and their key tiles 16 tokens (a multiple of the block).
  const bool f32_kind = kind == KernelKind::kCacheWrite || kind == KernelKind::kMergeStates;
  if (dtype == DType::kFloat32 && !f32_kind)
    throw Error("spec " + to_string() + ": dtype fp32 is not supported by the " + name_of(kind) +
                " kernel; supported: fp16, bf16 (fp32: cache_write and merge_states only)");
  if (block_size == kCacheWriteOnlyBlockSize && kind != KernelKind::kCacheWrite)
    throw Error("spec " + to_string() + ": block size 8 is not supported by the " + name_of(kind) +
                " kernel; supported: 16, 32, ..., 256 (multiples of 16; 8: cache_write only)");
  if ((kind == KernelKind::kMergeStates || kind == KernelKind::kBlockCopy) &&
      (!canonical_apart_from_dtype(*this) ||
       (kind == KernelKind::kBlockCopy && dtype != AttentionSpec().dtype)))
    throw Error("spec " + to_string() + ": the " + name_of(kind) + " kernel depends only on " +
                (kind == KernelKind::kMergeStates ? "the dtype and the arch" : "the arch") +
                "; keep every other axis at its default, e.g. " + name_of(kind) +
                "_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90");
  if (multi_token && kind != KernelKind::kDecode)
    throw Error("spec " + to_string() +
                ": multi-token (_mt) is a decode kernel's axis; prefill kernels take any query "
                "length already");
  if (kind == KernelKind::kCacheWrite &&
      (group != 1 || sliding_window || soft_cap || alibi || sinks))
    throw Error("spec " + to_string() +
                ": the cache write kernel does not depend on the group, window, soft cap, ALiBi "
                "or sinks; use g1_swa0_cap0 without _alibi or _sink so that one kernel serves "
                "them all");
  // Only prefill has a causal mask to drop: a decode query (the last position) sees every key
  // already, so cross attention's decodes run the causal decode kernel.
  if (non_causal && kind != KernelKind::kPrefill)
    throw Error("spec " + to_string() + ": non-causal (_nc) is a prefill axis; the " +
                name_of(kind) +
                " kernel has no causal mask to drop (a decode query sees every key already)");
  if (non_causal && sliding_window)
    throw Error("spec " + to_string() +
                ": non-causal (_nc) attention with a sliding window (swa1) is not supported; "
                "supported: swa0 with _nc");
  if (dense_kv && kind != KernelKind::kPrefill)
    throw Error("spec " + to_string() + ": dense KV (_dense) is a prefill axis, not " +
                name_of(kind));
  // Dense K/V have no pages, no cache element type and no block ids: one canonical kernel.
  if (dense_kv &&
      (block_size != 16 || kv_dtype != KvDType::kAuto || layout != KvLayout::kNHD || check_bounds))
    throw Error("spec " + to_string() +
                ": dense KV (_dense) reads no paged cache; use b16, kvauto, nhd and no _chk");
  // vLLM's block-sparse attention is causal self-attention over the paged cache.
  if (block_sparse &&
      (kind == KernelKind::kCacheWrite || kind == KernelKind::kKvScale || non_causal || dense_kv))
    throw Error("spec " + to_string() +
                ": block-sparse (_bsp) is an axis of causal paged decode and prefill kernels; "
                "not with " +
                (non_causal ? "_nc"
                 : dense_kv ? "_dense"
                            : name_of(kind)));
  // The legacy key cache splits the head into chunks of x = 16 bytes of elements.
  if (layout == KvLayout::kLegacy && head_size % (kv_dtype == KvDType::kAuto ? 8 : 16) != 0)
    throw Error(
        "spec " + to_string() + ": head size " + std::to_string(head_size) +
        " is not supported by the legacy layout with KV cache dtype " + name_of(kv_dtype) +
        "; supported: multiples of " +
        (kv_dtype == KvDType::kAuto ? "8 (x = 8 16-bit elements)" : "16 (x = 16 fp8 elements)"));
  if (kind == KernelKind::kKvScale &&
      (block_size != 16 || kv_dtype != KvDType::kAuto || group != 1 || sliding_window || soft_cap ||
       layout != KvLayout::kNHD || alibi || sinks || check_bounds))
    throw Error("spec " + to_string() +
                ": the kv_scale kernel depends only on the head size, dtype and arch; use "
                "b16_kvauto_g1_swa0_cap0_nhd without suffixes so that one kernel serves every "
                "layer, e.g. kv_scale_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90");
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
      case Form::kFlag: {
        if (!take_literal(text, pos, tag)) throw missing(label, "'" + tag + "<number>'");
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
