// SPDX-License-Identifier: Apache-2.0
#include "graphattn/error.hpp"

namespace graphattn {

CompileError::CompileError(std::string spec, std::string log, std::vector<std::string> options,
                           std::string numbered_source)
    : Error("NVRTC failed to compile " + spec + ":\n" + log),
      spec_(std::move(spec)),
      log_(std::move(log)),
      options_(std::move(options)),
      numbered_source_(std::move(numbered_source)) {}

}  // namespace graphattn
