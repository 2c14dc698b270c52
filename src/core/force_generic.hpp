// Whether the portable kernels are forced for every call (flashcore::set_force_generic,
// or FLASHCORE_FORCE_GENERIC=1 in the environment at start-up). The CPU dispatch and the
// checks of pre-packed operands read it.
#pragma once

namespace flashcore::core {

void set_force_generic(bool on);
bool force_generic();

}  // namespace flashcore::core
