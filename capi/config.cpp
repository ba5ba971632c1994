// SPDX-License-Identifier: Apache-2.0
// The C ABI's layer configuration: graphattn_layer_config_t to AttentionLayerConfig and back,
// both generated from GRAPHATTN_LAYER_CONFIG_FIELDS (graphattn/layer_config_fields.h), with the
// compile-time checks that tie that list to both structs.
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "capi.hpp"
#include "graphattn/blocksparse.hpp"
#include "graphattn/layer_config_fields.h"

namespace graphattn::capi {
namespace {

// ---- The list against the C++ struct: type, default, and a row for every member

constexpr AttentionLayerConfig kDefaults{};
#define GRAPHATTN_CHECK_CPP(type, member, default_value, ...)                                 \
  static_assert(std::is_same_v<decltype(std::declval<AttentionLayerConfig&>().member), type>, \
                "AttentionLayerConfig::" #member " is not of the type its row says");         \
  static_assert(kDefaults.member == default_value,                                            \
                "AttentionLayerConfig::" #member "'s default is not the one its row says");
GRAPHATTN_LAYER_CONFIG_FIELDS(GRAPHATTN_CHECK_CPP)
#undef GRAPHATTN_CHECK_CPP

// Converts to anything: T{AnyField x n} compiles for an aggregate T of n members or more.
struct AnyField {
  template <typename T>
  constexpr operator T() const;  // never defined: only used in unevaluated contexts
};
template <typename T, typename... A>
constexpr auto initializable(int) -> decltype(T{std::declval<A>()...}, true) {
  return true;
}
template <typename T, typename... A>
constexpr bool initializable(long) {
  return false;
}
// The number of members of the aggregate T.
template <typename T, typename... A>
constexpr size_t member_count() {
  if constexpr (initializable<T, A..., AnyField>(0)) {
    return member_count<T, A..., AnyField>();
  } else {
    return sizeof...(A);
  }
}

#define GRAPHATTN_MEMBER_NAME(type, member, ...) #member,
constexpr const char* kMembers[] = {GRAPHATTN_LAYER_CONFIG_FIELDS(GRAPHATTN_MEMBER_NAME)};
#undef GRAPHATTN_MEMBER_NAME
constexpr bool in_blocksparse(const char* member) {
  const char prefix[] = "blocksparse.";
  for (size_t i = 0; i + 1 < sizeof prefix; ++i)
    if (member[i] != prefix[i]) return false;
  return true;
}
// Rows of AttentionLayerConfig's own members (blocksparse counts once), and of blocksparse's.
constexpr size_t rows(bool blocksparse) {
  size_t own = 0, sparse = 0;
  for (const char* m : kMembers) (in_blocksparse(m) ? sparse : own) += 1;
  return blocksparse ? sparse : own + (sparse > 0 ? 1 : 0);
}
static_assert(member_count<AttentionLayerConfig>() == rows(false),
              "a member of AttentionLayerConfig has no row in GRAPHATTN_LAYER_CONFIG_FIELDS "
              "(graphattn/layer_config_fields.h): add one (fields(), so == and "
              "AttentionLayerStack's sharing, the C struct and Python come from it)");
static_assert(member_count<BlockSparseParams>() == rows(true),
              "a member of BlockSparseParams has no blocksparse.* row in "
              "GRAPHATTN_LAYER_CONFIG_FIELDS (graphattn/layer_config_fields.h)");

// ---- The list against the C struct: types, and one row per field in the struct's order

#define GRAPHATTN_CHECK_C(type, member, default_value, c_type, c_name, ...)         \
  static_assert(std::is_same_v<decltype(graphattn_layer_config_t::c_name), c_type>, \
                "graphattn_layer_config_t::" #c_name " is not of the type its row says");
GRAPHATTN_LAYER_CONFIG_FIELDS(GRAPHATTN_CHECK_C)
#undef GRAPHATTN_CHECK_C

struct CField {
  size_t offset, size, align;
};
#define GRAPHATTN_C_FIELD(type, member, default_value, c_type, c_name, ...) \
  CField{offsetof(graphattn_layer_config_t, c_name), sizeof(c_type), alignof(c_type)},
constexpr CField kCFields[] = {GRAPHATTN_LAYER_CONFIG_FIELDS(GRAPHATTN_C_FIELD)};
#undef GRAPHATTN_C_FIELD
constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
// Each row's field directly follows the previous one (struct_size first), and the last ends the
// struct: the C struct has no field the list lacks, and the list's order is the struct's.
constexpr bool c_fields_in_order() {
  size_t end = sizeof(size_t);  // struct_size
  for (const CField& f : kCFields) {
    if (f.offset != align_up(end, f.align)) return false;
    end = f.offset + f.size;
  }
  return align_up(end, alignof(graphattn_layer_config_t)) == sizeof(graphattn_layer_config_t);
}
static_assert(offsetof(graphattn_layer_config_t, struct_size) == 0 && c_fields_in_order(),
              "graphattn_layer_config_t's fields are not GRAPHATTN_LAYER_CONFIG_FIELDS's rows in "
              "order (graphattn/layer_config_fields.h)");

// ---- Conversions of one field

template <typename Cpp, typename C>
Cpp from_c(const C& c, const char* name) {
  if constexpr (std::is_same_v<Cpp, bool>) {
    return c != 0;
  } else if constexpr (std::is_same_v<Cpp, KvLayout>) {
    return enum_value<KvLayout>(c, name, kCKvLayouts);
  } else if constexpr (std::is_enum_v<Cpp>) {
    return enum_value<Cpp>(c, name);
  } else {
    return c;
  }
}

template <typename C, typename Cpp>
C to_c(const Cpp& v) {
  if constexpr (std::is_same_v<Cpp, bool>) {
    return v ? 1 : 0;
  } else {
    return static_cast<C>(v);
  }
}

}  // namespace

AttentionLayerConfig to_cpp(const graphattn_layer_config_t* config) {
  const graphattn_layer_config_t& c = sized(config, "config", kLayerConfigV1Bytes);
  AttentionLayerConfig o;  // a field past the caller's struct_size keeps its default
#define GRAPHATTN_TO_CPP(type, member, default_value, c_type, c_name, ...) \
  if (holds(c, &graphattn_layer_config_t::c_name))                         \
    o.member = from_c<type>(c.c_name, "config->" #c_name);
  GRAPHATTN_LAYER_CONFIG_FIELDS(GRAPHATTN_TO_CPP)
#undef GRAPHATTN_TO_CPP
  // The pattern is all or nothing: a struct that ends inside it gets dense attention.
  if (!holds(c, &graphattn_layer_config_t::blocksparse_active_head_offset)) o.blocksparse = {};
  return o;  // ranges and combinations: attention_config_problem()
}

void from_cpp(const AttentionLayerConfig& o, graphattn_layer_config_t* c) {
#define GRAPHATTN_FROM_CPP(type, member, default_value, c_type, c_name, ...) \
  if (holds(*c, &graphattn_layer_config_t::c_name)) c->c_name = to_c<c_type>(o.member);
  GRAPHATTN_LAYER_CONFIG_FIELDS(GRAPHATTN_FROM_CPP)
#undef GRAPHATTN_FROM_CPP
}

}  // namespace graphattn::capi

using namespace graphattn::capi;

extern "C" {

void graphattn_layer_config_init(graphattn_layer_config_t* config) noexcept {
  if (!config) return;
  *config = graphattn_layer_config_t{};
  config->struct_size = sizeof(graphattn_layer_config_t);
  from_cpp(graphattn::AttentionLayerConfig{}, config);
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

}  // extern "C"
