// SPDX-License-Identifier: Apache-2.0
// The mixed-batch modes' names (GRAPHATTN_MIXED_BRANCHES_MODES in graphattn/backend.hpp) and the
// two environment variables that set a new backend's mixed-batch behaviour,
// GRAPHATTN_MIXED_BRANCHES and GRAPHATTN_MIXED_DECODE_DIVISOR. Here in core so that
// check_flag_environment() (core/env_flag.cpp) can parse them before any backend is made.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/text.hpp"
#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"

namespace graphattn {

const char* mixed_branches_name(MixedBranches mode) {
  switch (mode) {
    case MixedBranches::kDefault:
      return "default";
#define GRAPHATTN_X_(e, name) \
  case MixedBranches::e:      \
    return name;
      GRAPHATTN_MIXED_BRANCHES_MODES(GRAPHATTN_X_)
#undef GRAPHATTN_X_
  }
  return "?";
}

namespace {
// The mode named `name` (GRAPHATTN_MIXED_BRANCHES' spelling); else Error "<what>"<name>" is not
// a mode; allowed: ...".
MixedBranches mixed_branches_named(const char* name, const std::string& what) {
  std::string allowed;
  for (MixedBranches k : kMixedBranchesModes) {
    if (name && std::strcmp(name, mixed_branches_name(k)) == 0) return k;
    allowed += std::string(allowed.empty() ? "" : ", ") + mixed_branches_name(k);
  }
  throw Error(what + "\"" + printable(name ? name : "") + "\" is not a mode; allowed: " + allowed);
}
}  // namespace

MixedBranches resolve_mixed_branches(MixedBranches m) {
  if (m != MixedBranches::kDefault) return m;
  const char* v = std::getenv("GRAPHATTN_MIXED_BRANCHES");
  if (!v || !*v) return MixedBranches::kPrefillFirst;
  return mixed_branches_named(v, "GRAPHATTN_MIXED_BRANCHES=");
}

MixedBranches parse_mixed_branches(const std::string& name) {
  return mixed_branches_named(name.c_str(), "mixed branches mode ");
}

int mixed_decode_divisor_from_env() {
  const char* v = std::getenv("GRAPHATTN_MIXED_DECODE_DIVISOR");
  if (!v || !*v) return kMixedDecodeDivisorDefault;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || *v < '0' || *v > '9' || *end != '\0' || n < 0 || n > 65535)
    throw Error("GRAPHATTN_MIXED_DECODE_DIVISOR=\"" + printable(v) +
                "\" is not supported; supported: an integer 0..65535 (0: the decode kernel "
                "chooses the splits from the decodes it counts; 1: size the decode of a batch "
                "split on the device for every request slot)");
  return static_cast<int>(n);
}

}  // namespace graphattn
