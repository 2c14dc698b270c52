// Switches read from the environment (FLASHCORE_FORCE_GENERIC, measurement switches).
#pragma once

#include <cstdlib>
#include <cstring>

namespace flashcore::core {

// Whether the variable `name` is set to something other than "" or "0".
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace flashcore::core
