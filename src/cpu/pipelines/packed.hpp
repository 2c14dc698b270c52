// What a flashcore::PackedOperands holds: the packed buffer and what it was packed for.
// softmax_v.cpp (v_layout) and gemm_chain.cpp (chain_layout) own the layouts: they pack and
// read the buffer. packed_state checks a packed object against a call; src/api checks the
// call's other arguments against what it returns, before anything runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/ukernels/ukernel.hpp"
#include "flashcore/flashcore.hpp"

namespace flashcore {

struct PackedOperands::State {
  enum class Op { gemm_chain, softmax_v };
  // Allocates `bytes` (64-byte aligned; throws std::bad_alloc), left for the packer to fill.
  State(Op op, DType dtype, const cpu::GemmUkernel* kernel, int64_t d0, int64_t d1, int64_t d2,
        size_t bytes);
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  Op op;
  DType dtype;                     // storage dtype of the tensors that were packed
  const cpu::GemmUkernel* kernel;  // the layout is this kernel's (its operand dtype and tiles)
  int64_t dims[3];                 // gemm_chain {K1, K2, N}; softmax_v {L, d, 0}
  char* data;                      // the packed operands (chain_layout, v_layout)
  size_t bytes;
};

}  // namespace flashcore

namespace flashcore::cpu {

// The state of a packed object that a call of op `op` may use: not empty, packed for this
// op, with the kernel that `impl` (params.impl) names when it names one, and not a SIMD
// kernel while the portable kernels are forced. Otherwise throws flashcore::Error
// (invalid_argument) naming "packed" or "params.impl".
const PackedOperands::State& packed_state(const PackedOperands& packed, PackedOperands::State::Op op,
                                          const char* impl);

}  // namespace flashcore::cpu
