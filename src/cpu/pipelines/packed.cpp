// The storage of PackedOperands and the checks of a packed object against a call.
#include "cpu/pipelines/packed.hpp"

#include <cstdlib>
#include <new>
#include <string>

#include "core/errors.hpp"
#include "core/force_generic.hpp"
#include "cpu/pipelines/common.hpp"

namespace flashcore {

PackedOperands::State::State(Op op_, DType dtype_, const cpu::GemmUkernel* kernel_, int64_t d0,
                             int64_t d1, int64_t d2, size_t bytes_)
    : op(op_), dtype(dtype_), kernel(kernel_), dims{d0, d1, d2}, data(nullptr), bytes(bytes_) {
  // Whole cache lines (see pack_slot); at least one, so that data is never null.
  data = static_cast<char*>(std::aligned_alloc(64, size_t(cpu::round_up(int64_t(bytes) + 1, 64))));
  if (data == nullptr) throw std::bad_alloc();
}

PackedOperands::State::~State() { std::free(data); }

}  // namespace flashcore

namespace flashcore::cpu {

const PackedOperands::State& packed_state(const PackedOperands& packed, PackedOperands::State::Op op,
                                          const char* impl) {
  const char* want = op == PackedOperands::State::Op::gemm_chain ? "gemm_chain" : "softmax_v";
  if (packed.empty()) throw_bad_argument("packed", std::string("is empty (make it with pack_") + want + ")");
  const PackedOperands::State& st = *packed.state();
  if (st.op != op)
    throw_bad_argument("packed", std::string("was packed for ") + packed.op() + " (pack_" + packed.op() +
                                     "), not for " + want);
  if (impl != nullptr && impl[0] != '\0' && std::string(impl) != "auto" &&
      std::string(impl) != st.kernel->key)
    throw_bad_argument("params.impl", std::string("names kernel '") + impl +
                                          "' but packed holds operands packed for '" + st.kernel->key +
                                          "' (pack again with this impl)");
  if (core::force_generic() && st.kernel->isa != Isa::generic)
    throw_bad_argument("packed", std::string("was packed for kernel '") + st.kernel->key +
                                     "' but the portable kernels are forced now (set_force_generic / "
                                     "FLASHCORE_FORCE_GENERIC): pack again");
  return st;
}

}  // namespace flashcore::cpu
