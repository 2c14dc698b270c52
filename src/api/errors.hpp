#pragma once

#include <string>

#include "flashcore/flashcore.hpp"

namespace flashcore {
[[noreturn]] inline void throw_error(Status code, const std::string& message) {
  throw Error(code, message);
}
}  // namespace flashcore
