// SPDX-License-Identifier: Apache-2.0
// What the tools say and how: --version, GRAPHATTN_LOG_LEVEL, graphattn-warmup --json, and the
// library's side of it (precompile's per-kernel callback, the log handler).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "graphattn/graphattn.h"
#include "graphattn/jit.hpp"
#include "graphattn/log.hpp"
#include "graphattn/runtime.hpp"
#include "tests/test_util.hpp"

#ifdef GRAPHATTN_WARMUP_TOOL
#include "tests/tool_runner.hpp"
#endif

using namespace graphattn;
using namespace graphattn::test;

TEST_CASE("log level: GRAPHATTN_LOG_LEVEL's names, case-insensitive; a bad one is named") {
  {
    test::ScopedEnv e("GRAPHATTN_LOG_LEVEL", nullptr);
    CHECK(log_level() == LogLevel::kInfo);
    CHECK(log_level_problem().empty());
  }
  const std::pair<const char*, LogLevel> names[] = {
      {"debug", LogLevel::kDebug},  {"INFO", LogLevel::kInfo},   {"Warning", LogLevel::kWarning},
      {"warn", LogLevel::kWarning}, {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  for (const auto& entry : names) {  // no structured binding: doctest's messages capture it
    const char* text = entry.first;
    test::ScopedEnv e("GRAPHATTN_LOG_LEVEL", text);
    CHECK_MESSAGE(log_level() == entry.second, text);
    CHECK(log_level_problem().empty());
  }
  test::ScopedEnv e("GRAPHATTN_LOG_LEVEL", "loud\x1b");
  CHECK(log_level() == LogLevel::kInfo);
  CHECK(log_level_problem() ==
        "GRAPHATTN_LOG_LEVEL 'loud\\x1b' is not a log level; supported: debug, info, warning, "
        "error or off");
  test::ScopedEnv off("GRAPHATTN_LOG_LEVEL", "off");
  CHECK_FALSE(log_enabled(LogLevel::kError));
}

TEST_CASE(
    "precompile: on_done gets each spec's result once, as the returned vector has it; "
    "debug lines go to the log handler") {
  TempDir dir;
  CacheOptions o;
  o.dir = dir.path();
  KernelCache cache(o);
  const std::vector<AttentionSpec> specs = {
      AttentionSpec::parse("cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"),
      AttentionSpec::parse("cache_write_h64_b16_fp16_kvauto_g1_swa0_cap0_nhd_sm80")};
  std::mutex mu;
  std::vector<std::pair<LogLevel, std::string>> logged;
  set_log_handler([&](LogLevel l, const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    logged.emplace_back(l, m);
  });
  std::vector<std::pair<size_t, PrecompileResult>> done;
  std::vector<PrecompileResult> results;
  {
    test::ScopedEnv e("GRAPHATTN_LOG_LEVEL", "debug");
    results = cache.precompile(specs, 2, [&](size_t i, const PrecompileResult& r) {
      done.emplace_back(i, r);  // one call at a time: no lock needed
    });
  }
  set_log_handler(nullptr);
  REQUIRE(results.size() == 2);
  REQUIRE(done.size() == 2);
  std::set<size_t> seen;
  for (const auto& [i, r] : done) {
    REQUIRE(i < 2);
    seen.insert(i);
    CHECK(r.spec == specs[i].to_string());
    CHECK(r.spec == results[i].spec);
    CHECK(r.origin == results[i].origin);
    CHECK(r.error.empty());
  }
  CHECK(seen.size() == 2);
  REQUIRE(logged.size() == 2);
  for (const auto& [level, msg] : logged) {
    CHECK(level == LogLevel::kDebug);
    CHECK(msg.find("graphattn: precompile cache_write_h") == 0);
    CHECK(msg.find(": compiled in ") != std::string::npos);
  }
  // A warning level hides the debug lines; nothing reaches the handler.
  logged.clear();
  set_log_handler([&](LogLevel l, const std::string& m) { logged.emplace_back(l, m); });
  {
    test::ScopedEnv e("GRAPHATTN_LOG_LEVEL", "warning");
    cache.precompile(specs, 1);
  }
  set_log_handler(nullptr);
  CHECK(logged.empty());
}

#ifdef GRAPHATTN_WARMUP_TOOL
TEST_CASE("tools: --version names the tool, the library and NVRTC; a bad log level exits 2") {
  const std::string version = graphattn_version();
  for (const auto& tool_name :
       {std::make_pair(std::string(GRAPHATTN_WARMUP_TOOL), std::string("graphattn-warmup")),
        std::make_pair(std::string(GRAPHATTN_CACHE_TOOL), std::string("graphattn-cache"))}) {
    // Not a structured binding: doctest's messages capture their operands in lambdas.
    const std::string& tool = tool_name.first;
    const std::string& name = tool_name.second;
    const ToolRun r = run_program(tool, {"--version"});
    CHECK_MESSAGE(r.code == 0, name << ": " << r.err);
    CHECK_MESSAGE(r.out.find(name + " " + version + " (C ABI ") == 0, r.out);
    CHECK(r.out.find(", NVRTC ") != std::string::npos);
    const std::vector<std::string> args =
        name == "graphattn-cache" ? std::vector<std::string>{"list"} : std::vector<std::string>{};
    const ToolRun bad = run_program(tool, args, {"GRAPHATTN_LOG_LEVEL=chatty"});
    CHECK_MESSAGE(bad.code == 2, name << ": " << bad.out << bad.err);
    CHECK_MESSAGE(bad.err.find("GRAPHATTN_LOG_LEVEL 'chatty' is not a log level; supported: "
                               "debug, info, warning, error or off") != std::string::npos,
                  bad.err);
  }
}

TEST_CASE("warmup tool: --json prints one document on stdout and the lines on stderr") {
  TempDir dir;
  const bool gpu = gpu_available();
  int arch = 80;  // any supported one without a GPU; the GPU's own with one
  if (gpu) {
    ensure_context(0);
    arch = current_device_arch();
  }
  std::vector<std::string> args = {"--json", "--cache-dir", dir.path(), "--steps", "20"};
  if (!gpu) args.insert(args.end(), {"--arch", "80"});
  const ToolRun r = run_program(GRAPHATTN_WARMUP_TOOL, args);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const nlohmann::json j = nlohmann::json::parse(r.out);  // throws (fails) if not one document
  CHECK(j["version"] == graphattn_version());
  CHECK(j["model"] == "llama-3-8b");
  CHECK(j["arch"] == arch);
  CHECK(j["exit_code"] == 0);
  CHECK(j["cache_dir"] == dir.path());
  const auto& c = j["compile"];
  REQUIRE(c["kernels"].size() == 5);  // with the mixed graphs' _dsp and _dsp_long decodes
  CHECK(c["compiled"].get<int>() + c["hits"].get<int>() == 5);
  CHECK(c["failed"] == 0);
  for (const auto& k : c["kernels"]) {
    CHECK(k["spec"].get<std::string>().find("_sm" + std::to_string(arch)) != std::string::npos);
    CHECK(k["ms"].get<double>() >= 0);
  }
  // The lines for people: every kernel's, on stderr.
  for (const auto& k : c["kernels"])
    CHECK(r.err.find("  " + k["spec"].get<std::string>()) != std::string::npos);
  CHECK(r.err.find("[compile] 5 kernels: ") != std::string::npos);
  if (!gpu) {
    CHECK(j["gpu"] == false);
    CHECK(j["skipped"].get<std::string>().find("no GPU found") != std::string::npos);
  } else {
    CHECK(j["decode"]["mismatches"] == 0);
  }
}
#endif
