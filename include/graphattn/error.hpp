// SPDX-License-Identifier: Apache-2.0
// Errors thrown by graphattn. The library throws; it never aborts and never prints from a
// hot path. Every message names the bad value and, where there is a closed set, what is allowed.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "graphattn/export.h"

namespace graphattn {

// Any failure: bad input, a driver or NVRTC call that failed, an unusable cache.
class GRAPHATTN_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// NVRTC rejected a rendered kernel source. Carries everything needed to reproduce it.
class GRAPHATTN_API CompileError : public Error {
 public:
  CompileError(std::string spec, std::string log, std::vector<std::string> options,
               std::string numbered_source);

  const std::string& spec() const { return spec_; }
  const std::string& log() const { return log_; }
  const std::vector<std::string>& options() const { return options_; }
  // The rendered source with 1-based line numbers, matching the line numbers in log().
  const std::string& numbered_source() const { return numbered_source_; }

 private:
  std::string spec_;
  std::string log_;
  std::vector<std::string> options_;
  std::string numbered_source_;
};

}  // namespace graphattn
