// SPDX-License-Identifier: Apache-2.0
// The bad-input sweep: the tools run as real binaries on hostile and careless input (empty, huge,
// non-ASCII and control-character values, out-of-range numbers, malformed environment variables,
// a cache path that is a file or a device, junk named like entries, a huge sparse entry). Each
// case ends with its documented exit status (2 for wrong usage, 1 for a problem found in the
// cache) and a message naming the value, never a crash or a hang: every run is bounded by
// timeout(1), whose 124 fails the case.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "graphattn/runtime.hpp"
#include "jit_cache/disk_tier.hpp"
#include "tests/tool_runner.hpp"

#if !defined(GRAPHATTN_CACHE_TOOL) || !defined(GRAPHATTN_WARMUP_TOOL)
#error "GRAPHATTN_CACHE_TOOL and GRAPHATTN_WARMUP_TOOL must name the tools (see tests/tests.cmake)"
#endif

namespace {

namespace fs = std::filesystem;
using graphattn::test::run_program;
using graphattn::test::TempDir;

const char* kWriteSpec = "cache_write_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90";

struct Case {
  const char* name;
  const char* tool;               // GRAPHATTN_CACHE_TOOL or GRAPHATTN_WARMUP_TOOL
  std::vector<std::string> args;  // "{dir}" is replaced by the case's cache directory
  std::vector<std::string> env;   // NAME=value; "{dir}" replaced too
  int code;                       // expected exit status
  std::string says;               // expected in stderr (escaped as the tools escape it)
  std::function<void(const std::string& dir)> setup = nullptr;
};

std::string fill(std::string s, const std::string& dir) {
  for (size_t at; (at = s.find("{dir}")) != std::string::npos;) s.replace(at, 5, dir);
  return s;
}

// The one entry that compiling kWriteSpec into dir leaves there.
std::string compile_one(const std::string& dir) {
  const auto r = run_program(GRAPHATTN_CACHE_TOOL, {"--dir", dir, "compile", "--spec", kWriteSpec});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().extension() == ".gakc") return f.path().string();
  FAIL("no entry written");
  return "";
}

const std::string kHuge(100000, 'x');

std::vector<Case> cases() {
  const char* cache = GRAPHATTN_CACHE_TOOL;
  const char* warmup = GRAPHATTN_WARMUP_TOOL;
  return {
      // Spec strings.
      {"empty spec",
       cache,
       {"--dir", "{dir}", "compile", "--spec", ""},
       {},
       2,
       "malformed spec string '': unknown kernel kind"},
      {"huge spec",
       cache,
       {"--dir", "{dir}", "compile", "--spec", "decode_" + kHuge},
       {},
       2,
       "... (100007 bytes)"},
      {"non-ASCII spec",
       cache,
       {"--dir", "{dir}", "compile", "--spec",
        "d\xc3\xa9"
        "code_h128_b16_bf16_kvauto_g1_swa0_cap0_nhd_sm90"},
       {},
       2,
       "'d\\xc3\\xa9code_h128"},
      {"control characters in a spec",
       cache,
       {"--dir", "{dir}", "compile", "--spec", "decode_h128\x1b[2J"},
       {},
       2,
       "decode_h128\\x1b[2J"},
      {"unsupported head size",
       cache,
       {"--dir", "{dir}", "compile", "--spec", "decode_h100_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"},
       {},
       2,
       "head size 100 is not supported"},
      {"show with a huge argument",
       cache,
       {"--dir", "{dir}", "show", kHuge},
       {},
       1,
       "is neither a key prefix"},
      // Numbers out of range.
      {"--max-bytes -1",
       cache,
       {"--dir", "{dir}", "prune", "--max-bytes", "-1"},
       {},
       2,
       "--max-bytes '-1' is not a size: it is negative"},
      {"--max-bytes 1e99",
       cache,
       {"--dir", "{dir}", "prune", "--max-bytes", "1e99"},
       {},
       2,
       "--max-bytes '1e99' is not a size: unknown unit 'e99'"},
      {"--max-bytes overflowing",
       cache,
       {"--dir", "{dir}", "prune", "--max-bytes", "17179869184G"},
       {},
       2,
       "exceeds 2^64 - 1"},
      {"--max-bytes abc",
       cache,
       {"--dir", "{dir}", "prune", "--max-bytes", "abc"},
       {},
       2,
       "--max-bytes 'abc' is not a size"},
      {"--older-than -1",
       cache,
       {"--dir", "{dir}", "prune", "--older-than", "-1"},
       {},
       2,
       "not '-1'"},
      {"--older-than nan",
       cache,
       {"--dir", "{dir}", "prune", "--older-than", "nan"},
       {},
       2,
       "not 'nan'"},
      {"--threads 99999",
       cache,
       {"--dir", "{dir}", "compile", "--threads", "99999", "--spec", kWriteSpec},
       {},
       2,
       "99999"},
      {"compile --arch 75",
       cache,
       {"--dir", "{dir}", "compile", "--model", "llama-3-8b", "--arch", "75"},
       {},
       2,
       "target arch sm_75 is not supported"},
      {"compile --block-size 24",
       cache,
       {"--dir", "{dir}", "compile", "--model", "llama-3-8b", "--block-size", "24"},
       {},
       2,
       "block size 24 is not supported"},
      {"warmup --kv-cache-gib -1",
       warmup,
       {"--kv-cache-gib", "-1"},
       {},
       2,
       "--kv-cache-gib -1 is not allowed"},
      {"warmup --kv-cache-gib inf",
       warmup,
       {"--kv-cache-gib", "inf"},
       {},
       2,
       "--kv-cache-gib inf is not allowed"},
      {"warmup --capture-sizes 0",
       warmup,
       {"--capture-sizes", "0"},
       {},
       2,
       "--capture-sizes 0 is not allowed"},
      {"warmup --seed -1", warmup, {"--seed", "-1"}, {}, 2, "--seed '-1' is not allowed"},
      {"warmup --seed 2^64",
       warmup,
       {"--seed", "18446744073709551616"},
       {},
       2,
       "--seed '18446744073709551616' is not allowed"},
      {"warmup --block-size 24",
       warmup,
       {"--block-size", "24"},
       {},
       2,
       "--block-size 24 is not supported"},
      {"warmup --arch 75", warmup, {"--arch", "75"}, {}, 2, "--arch 75 is not supported"},
      {"warmup --max-num-seqs 0", warmup, {"--max-num-seqs", "0"}, {}, 2, "--max-num-seqs"},
      {"warmup --threads -1", warmup, {"--threads", "-1"}, {}, 2, "--threads"},
      {"warmup empty model", warmup, {"--model", ""}, {}, 2, "unknown model ''"},
      {"warmup model with control characters",
       warmup,
       {"--model", "llama\x07\n"},
       {},
       2,
       "unknown model 'llama\\x07\\x0a'"},
      // The environment.
      {"GRAPHATTN_CACHE_MAX_BYTES=abc",
       cache,
       {"--dir", "{dir}", "list"},
       {"GRAPHATTN_CACHE_MAX_BYTES=abc"},
       2,
       "GRAPHATTN_CACHE_MAX_BYTES 'abc' is not a size"},
      {"GRAPHATTN_CACHE_MAX_BYTES=-1",
       cache,
       {"--dir", "{dir}", "stats"},
       {"GRAPHATTN_CACHE_MAX_BYTES=-1"},
       2,
       "'-1' is not a size: it is negative"},
      {"GRAPHATTN_CACHE_MAX_BYTES=1e99",
       warmup,
       {},
       {"GRAPHATTN_CACHE_MAX_BYTES=1e99"},
       2,
       "GRAPHATTN_CACHE_MAX_BYTES '1e99' is not a size"},
      {"GRAPHATTN_CACHE_MAX_BYTES=17179869184G",
       warmup,
       {},
       {"GRAPHATTN_CACHE_MAX_BYTES=17179869184G"},
       2,
       "exceeds 2^64 - 1"},
      {"GRAPHATTN_CACHE_MAX_BYTES=5Mxyz",
       warmup,
       {},
       {"GRAPHATTN_CACHE_MAX_BYTES=5Mxyz"},
       2,
       "unknown unit 'Mxyz'"},
      {"GRAPHATTN_CACHE_MAX_BYTES=' 12'",
       warmup,
       {},
       {"GRAPHATTN_CACHE_MAX_BYTES= 12"},
       2,
       "' 12' is not a size"},
      {"GRAPHATTN_CACHE_SHARED=2",
       cache,
       {"--dir", "{dir}", "list"},
       {"GRAPHATTN_CACHE_SHARED=2"},
       2,
       "GRAPHATTN_CACHE_SHARED='2' is not supported"},
      // Cache paths that are no directory.
      {"--dir is a file",
       cache,
       {"--dir", "{dir}/file", "list"},
       {},
       2,
       "/file' is a regular file, not a directory",
       [](const std::string& d) {
         REQUIRE(std::system(("echo x > " + d + "/file").c_str()) == 0);
       }},
      {"--dir /dev/null",
       cache,
       {"--dir", "/dev/null", "verify"},
       {},
       2,
       "'/dev/null' is a character device, not a directory"},
      {"--dir empty", cache, {"--dir", "", "list"}, {}, 2, "no cache directory"},
      {"warmup --cache-dir /dev/null",
       warmup,
       {"--cache-dir", "/dev/null"},
       {},
       2,
       "--cache-dir '/dev/null' is not a directory"},
      {"warmup GRAPHATTN_CACHE_DIR=/dev/null",
       warmup,
       {},
       {"GRAPHATTN_CACHE_DIR=/dev/null"},
       2,
       "GRAPHATTN_CACHE_DIR '/dev/null' is not a directory"},
      // Junk in the cache directory: a problem found (1), or a job that goes on (0).
      {"entry replaced by a directory: verify",
       cache,
       {"--dir", "{dir}", "verify"},
       {},
       1,
       "not a regular file: is a directory",
       [](const std::string& d) {
         const std::string e = compile_one(d);
         fs::remove(e);
         fs::create_directory(e);
       }},
      {"entry replaced by a directory: compile",
       cache,
       {"--dir", "{dir}", "compile", "--spec", kWriteSpec},
       {},
       1,
       "could not write cache entry",
       [](const std::string& d) {
         const std::string e = compile_one(d);
         fs::remove(e);
         fs::create_directory(e);
       }},
      {"huge sparse entry: verify",
       cache,
       {"--dir", "{dir}", "verify"},
       {},
       1,
       "too large: file of 68719476736 bytes is larger than any entry",
       [](const std::string& d) {
         const std::string e = compile_one(d);
         REQUIRE(::truncate(e.c_str(), off_t{64} << 30) == 0);
       }},
      {"FIFO entry: clear",
       cache,
       {"--dir", "{dir}", "clear"},
       {},
       0,
       "",
       [](const std::string& d) {
         // A cache directory (its marker) in which a FIFO is named like an entry.
         std::ofstream(d + "/" + graphattn::detail::kCacheMarkerName) << "graphattn kernel cache\n";
         REQUIRE(::mkfifo((d + "/" + std::string(32, '0') + ".gakc").c_str(), 0600) == 0);
       }},
      {"warmup over a FIFO entry and a huge sparse entry",
       warmup,
       {"--model", "llama-3-8b", "--arch", "90", "--cache-dir", "{dir}"},
       {},
       0,
       "",
       [](const std::string& d) {
         const std::string e = compile_one(d);
         REQUIRE(::truncate(e.c_str(), off_t{64} << 30) == 0);
         REQUIRE(::mkfifo((d + "/" + std::string(32, '1') + ".gakc").c_str(), 0600) == 0);
       }},
  };
}

}  // namespace

TEST_CASE("bad input sweep: each case exits as documented with a message naming the value") {
  const bool gpu = graphattn::gpu_available();
  for (const Case& c : cases()) {
    INFO("case: " << std::string(c.name));
    // A warmup that succeeds goes on to capture and decode where there is a GPU: the GPU suite
    // runs those.
    if (gpu && c.code == 0 && std::string(c.tool) == GRAPHATTN_WARMUP_TOOL) continue;
    TempDir dir;
    if (c.setup) c.setup(dir.path());
    std::vector<std::string> args = {"60", c.tool};
    for (const auto& a : c.args) args.push_back(fill(a, dir.path()));
    std::vector<std::string> env;
    for (const auto& e : c.env) env.push_back(fill(e, dir.path()));
    const auto r = run_program("timeout", args, env);
    INFO("exit " << r.code << "\nstderr: " << r.err.substr(0, 2000));
    CHECK(r.code != 124);  // hung
    CHECK(r.code == c.code);
    // People read the message on stderr; verify's table of bad entries is on stdout.
    CHECK((r.err + r.out).find(c.says) != std::string::npos);
    // Messages hold no raw control characters (beyond line ends) whatever the input was.
    size_t raw = 0;
    for (char ch : r.err + r.out) raw += ch == '\n' || (ch >= 0x20 && ch < 0x7f) ? 0 : 1;
    CHECK(raw == 0);
  }
}
