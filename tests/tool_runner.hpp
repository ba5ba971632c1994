// SPDX-License-Identifier: Apache-2.0
// Runs one of the project's real binaries from a test and captures its exit status and output.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.hpp"

namespace graphattn::test {

struct ToolRun {
  int code = -1;    // exit status; -1 when it did not exit normally
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `binary args...`. The environment variables graphattn reads are cleared unless given in
// env ("NAME=value" words), so the developer's own settings never leak into a test.
inline ToolRun run_program(const std::string& binary, const std::vector<std::string>& args,
                           const std::vector<std::string>& env = {}) {
  TempDir scratch;
  const std::string err_path = scratch.path() + "/stderr";
  std::string cmd =
      "env -u GRAPHATTN_DUMP_SOURCE -u GRAPHATTN_CACHE_MAX_BYTES -u GRAPHATTN_CACHE_DIR"
      " -u GRAPHATTN_CACHE_DIRS -u GRAPHATTN_CACHE_SHARED -u GRAPHATTN_REMOTE_CACHE"
      " -u GRAPHATTN_CACHE_SIGNING_KEY -u GRAPHATTN_LOG_LEVEL -u GRAPHATTN_NVRTC_EXTRA_OPTIONS";
  for (const auto& e : env) cmd += " " + shell_quote(e);
  cmd += " " + shell_quote(binary);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>" + shell_quote(err_path);
  ToolRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE_MESSAGE(p != nullptr, "popen failed for " << cmd);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_all(err_path);
  return r;
}

}  // namespace graphattn::test
