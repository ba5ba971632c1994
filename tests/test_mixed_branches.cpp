// SPDX-License-Identifier: Apache-2.0
// GRAPHATTN_MIXED_BRANCHES and AttentionBackend::set_mixed_branches without a GPU: the mode a
// backend takes at construction, per backend and per copy, and the error for a bad value. (The
// GPU tests check the launches: tests/gpu/test_decode_graphs.cpp, test_concurrency.cpp.)
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "graphattn/backend.hpp"
#include "graphattn/error.hpp"
#include "testing/configs.hpp"
#include "tests/test_util.hpp"

using namespace graphattn;

TEST_CASE(
    "mixed branches: GRAPHATTN_MIXED_BRANCHES sets a backend's mode, set_mixed_branches one's") {
  AttentionLayerConfig c = test::layer_config(8, 2, 128, 1024, 4);
  c.arch = 90;
  const char* old = std::getenv("GRAPHATTN_MIXED_BRANCHES");
  const std::string saved = old ? old : "";
  ::unsetenv("GRAPHATTN_MIXED_BRANCHES");
  CHECK(AttentionBackend(c).mixed_branches() == MixedBranches::kPrefillFirst);
  CHECK(resolve_mixed_branches(MixedBranches::kDefault) == MixedBranches::kPrefillFirst);
  for (MixedBranches m : {MixedBranches::kSerial, MixedBranches::kSerialPrefillFirst,
                          MixedBranches::kDecodeFirst, MixedBranches::kPrefillFirst,
                          MixedBranches::kDecodeFirstHigh, MixedBranches::kPrefillFirstHigh}) {
    const std::string name = mixed_branches_name(m);
    INFO("GRAPHATTN_MIXED_BRANCHES=" << name);
    ::setenv("GRAPHATTN_MIXED_BRANCHES", name.c_str(), 1);
    CHECK(AttentionBackend(c).mixed_branches() == m);
    CHECK(resolve_mixed_branches(MixedBranches::kDecodeFirst) == MixedBranches::kDecodeFirst);
  }
  CHECK(std::string(mixed_branches_name(MixedBranches::kSerial)) == "off");
  ::setenv("GRAPHATTN_MIXED_BRANCHES", "off", 1);
  AttentionBackend a(c);
  CHECK(a.mixed_branches() == MixedBranches::kSerial);
  AttentionBackend copy = a;
  a.set_mixed_branches(MixedBranches::kDecodeFirst);  // copies made before keep their mode
  CHECK(a.mixed_branches() == MixedBranches::kDecodeFirst);
  CHECK(copy.mixed_branches() == MixedBranches::kSerial);
  a.set_mixed_branches(MixedBranches::kDefault);  // resolved again: the variable
  CHECK(a.mixed_branches() == MixedBranches::kSerial);
  ::setenv("GRAPHATTN_MIXED_BRANCHES", "prefill_first", 1);
  CHECK_THROWS_WITH_AS(
      AttentionBackend{c},
      doctest::Contains("GRAPHATTN_MIXED_BRANCHES=\"prefill_first\" is not a mode; "
                        "allowed: off, serial-prefill-first, decode-first"),
      Error);
  if (old)
    ::setenv("GRAPHATTN_MIXED_BRANCHES", saved.c_str(), 1);
  else
    ::unsetenv("GRAPHATTN_MIXED_BRANCHES");
}
