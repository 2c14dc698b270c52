#include "core/force_generic.hpp"

#include <atomic>

#include "core/env.hpp"

namespace flashcore::core {
namespace {
std::atomic<bool> g_force_generic{env_flag("FLASHCORE_FORCE_GENERIC")};
}  // namespace

void set_force_generic(bool on) { g_force_generic.store(on); }
bool force_generic() { return g_force_generic.load(); }

}  // namespace flashcore::core
