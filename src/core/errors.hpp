// How the library raises an error: flashcore::Error with a status code and a message that
// names the argument (every layer uses this; the C ABI turns it into a status).
#pragma once

#include <string>

#include "flashcore/types.hpp"

namespace flashcore {

[[noreturn]] inline void throw_error(Status code, const std::string& message) {
  throw Error(code, message);
}

// A bad argument: Status::invalid_argument, the message "<name>: <what>".
[[noreturn]] inline void throw_bad_argument(const char* name, const std::string& what) {
  throw_error(Status::invalid_argument, std::string(name) + ": " + what);
}

}  // namespace flashcore
