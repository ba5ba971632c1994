// AttentionSpec: validation, the canonical string and its parser.
#include "graphattn/spec.hpp"

#include <cstdlib>
#include <sstream>

#include "graphattn/error.hpp"
#include "jit_cache/text.hpp"

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

int dtype_bytes(DType) { return 2; }
int kv_dtype_bytes(KvDType t, DType auto_type) {
  return t == KvDType::kAuto ? dtype_bytes(auto_type) : 1;
}

const char* to_string(KernelKind k) {
  switch (k) {
    case KernelKind::kCacheWrite: return "cache_write";
    case KernelKind::kDecode: return "decode";
    case KernelKind::kPrefill: return "prefill";
  }
  return "?";
}
const char* to_string(DType t) { return t == DType::kFloat16 ? "fp16" : "bf16"; }
const char* to_string(KvDType t) {
  switch (t) {
    case KvDType::kAuto: return "auto";
    case KvDType::kFp8E4M3: return "e4m3";
    case KvDType::kFp8E5M2: return "e5m2";
  }
  return "?";
}
const char* to_string(KvLayout l) { return l == KvLayout::kNHD ? "nhd" : "hnd"; }

void AttentionSpec::validate() const {
  if (kind != KernelKind::kCacheWrite && kind != KernelKind::kDecode &&
      kind != KernelKind::kPrefill)
    fail("kernel kind", std::to_string(static_cast<int>(kind)), "cache_write, decode, prefill");
  if (!contains(supported_head_sizes(), head_size))
    fail("head size", std::to_string(head_size), "32, 40, ..., 256 (multiples of 8)");
  if (!contains(supported_block_sizes(), block_size))
    fail("block size", std::to_string(block_size), "16, 32, ..., 256 (multiples of 16)");
  if (dtype != DType::kFloat16 && dtype != DType::kBFloat16)
    fail("dtype", std::to_string(static_cast<int>(dtype)), "fp16, bf16");
  if (kv_dtype != KvDType::kAuto && kv_dtype != KvDType::kFp8E4M3 &&
      kv_dtype != KvDType::kFp8E5M2)
    fail("KV cache dtype", std::to_string(static_cast<int>(kv_dtype)), "auto, e4m3, e5m2");
  if (group < 1 || group > kMaxGroup)
    fail("queries per KV head (group)", std::to_string(group), "1..64");
  if (layout != KvLayout::kNHD && layout != KvLayout::kHND)
    fail("KV layout", std::to_string(static_cast<int>(layout)), "nhd, hnd");
  if (!contains(supported_archs(), arch)) {
    std::string allowed;
    for (int a : supported_archs()) allowed += (allowed.empty() ? "sm_" : ", sm_") + std::to_string(a);
    fail("target arch", "sm_" + std::to_string(arch), allowed);
  }
  if (kind == KernelKind::kCacheWrite && (group != 1 || sliding_window || soft_cap))
    throw Error("spec " + to_string() +
                ": the cache write kernel does not depend on the group, window or soft cap; "
                "use g1_swa0_cap0 so that one kernel serves them all");
}

std::string AttentionSpec::to_string() const {
  std::ostringstream os;
  os << graphattn::to_string(kind) << "_h" << head_size << "_b" << block_size << "_"
     << graphattn::to_string(dtype) << "_kv" << graphattn::to_string(kv_dtype) << "_g" << group
     << "_swa" << (sliding_window ? 1 : 0) << "_cap" << (soft_cap ? 1 : 0) << "_"
     << graphattn::to_string(layout) << "_sm" << arch << (check_bounds ? "_chk" : "");
  return os.str();
}

bool AttentionSpec::operator==(const AttentionSpec& o) const {
  return kind == o.kind && head_size == o.head_size && block_size == o.block_size &&
         dtype == o.dtype && kv_dtype == o.kv_dtype && group == o.group &&
         sliding_window == o.sliding_window && soft_cap == o.soft_cap && layout == o.layout &&
         arch == o.arch && check_bounds == o.check_bounds;
}

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

bool take_literal(const std::string& s, size_t& pos, const char* lit) {
  std::string l(lit);
  if (s.compare(pos, l.size(), l) != 0) return false;
  pos += l.size();
  return true;
}

}  // namespace

AttentionSpec AttentionSpec::parse(const std::string& text) {
  const char* grammar =
      "<cache_write|decode|prefill>_h<head>_b<block>_<fp16|bf16>_kv<auto|e4m3|"
      "e5m2>_g<group>_swa<0|1>_cap<0|1>_<nhd|hnd>_sm<arch>[_chk]";
  auto bad = [&](const std::string& why) -> Error {
    return Error("malformed spec string '" + detail::printable(text) + "': " + why +
                 "; expected " + grammar +
                 ", e.g. decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90");
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
  // A field whose literal is present: "<lit><number>".
  auto number = [&](const char* lit, const std::string& field, int& out) {
    if (!take_literal(text, pos, lit)) throw missing(field, std::string("'") + lit + "<number>'");
    const size_t at = pos;
    switch (take_number(text, pos, out)) {
      case Number::kOk: return;
      case Number::kNone:
        throw bad(field + " field '" + lit + "' has no number: found " + found(at));
      case Number::kLeadingZero:
        throw bad(field + " field '" + lit + "' has a number with a leading zero: found " +
                  found(at));
      case Number::kTooLong:
        throw bad(field + " field '" + lit + "' has a number of more than 6 digits: found " +
                  found(at));
    }
  };
  auto flag = [&](const char* lit, const std::string& field) {
    int v = 0;
    number(lit, field, v);
    if (v > 1) throw bad(field + " field '" + lit + "' must be 0 or 1, found " + std::to_string(v));
    return v == 1;
  };
  if (take_literal(text, pos, "cache_write_")) s.kind = KernelKind::kCacheWrite;
  else if (take_literal(text, pos, "decode_")) s.kind = KernelKind::kDecode;
  else if (take_literal(text, pos, "prefill_")) s.kind = KernelKind::kPrefill;
  else throw bad("unknown kernel kind: found " + found(0));
  number("h", "head size", s.head_size);
  number("_b", "block size", s.block_size);
  if (take_literal(text, pos, "_fp16")) s.dtype = DType::kFloat16;
  else if (take_literal(text, pos, "_bf16")) s.dtype = DType::kBFloat16;
  else throw missing("dtype", "_fp16 or _bf16");
  if (take_literal(text, pos, "_kvauto")) s.kv_dtype = KvDType::kAuto;
  else if (take_literal(text, pos, "_kve4m3")) s.kv_dtype = KvDType::kFp8E4M3;
  else if (take_literal(text, pos, "_kve5m2")) s.kv_dtype = KvDType::kFp8E5M2;
  else throw missing("KV dtype", "_kvauto, _kve4m3 or _kve5m2");
  number("_g", "group", s.group);
  s.sliding_window = flag("_swa", "window");
  s.soft_cap = flag("_cap", "soft cap");
  if (take_literal(text, pos, "_nhd")) s.layout = KvLayout::kNHD;
  else if (take_literal(text, pos, "_hnd")) s.layout = KvLayout::kHND;
  else throw missing("layout", "_nhd or _hnd");
  number("_sm", "arch", s.arch);
  s.check_bounds = take_literal(text, pos, "_chk");
  if (pos != text.size()) throw bad("trailing characters " + found(pos));
  s.validate();
  return s;
}

}  // namespace graphattn
