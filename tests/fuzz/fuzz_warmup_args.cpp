// SPDX-License-Identifier: Apache-2.0
// graphattn-warmup's command line (tools/warmup_options.cpp) on arbitrary argument lists: the
// input is split at NUL bytes into at most 16 arguments. Whatever they are, parsing ends in
// "run" (-1), help (0) or usage (2) and never throws; "run" only with settings that pass every
// check; a usage message names what is wrong printably.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_common.hpp"
#include "tools/warmup_options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words = {"graphattn-warmup"};
  std::string cur;
  for (size_t i = 0; i < size && words.size() < 17; ++i) {
    if (data[i] == 0) {
      words.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  if (words.size() < 17) words.push_back(cur);
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  const graphattn::tools::WarmupArgs a =
      graphattn::tools::parse_warmup_args(static_cast<int>(argv.size()), argv.data());
  if (a.exit_code == -1) {
    if (!a.settings.list_models && !graphattn::tools::warmup_settings_problem(a.settings).empty())
      graphattn::fuzz::broken("accepted settings that fail their own checks");
  } else if (a.exit_code == 2) {
    graphattn::fuzz::check_message(a.text);
  } else if (a.exit_code != 0) {
    graphattn::fuzz::broken("exit code " + std::to_string(a.exit_code));
  }
  return 0;
}
