// Helpers shared by the flashcore test suites: owned strided tensors in any storage
// dtype, fresh random inputs (the seed is printed on failure), NaN poisoning, and the
// rel_err / tolerance rules of BENCH.md.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu/dispatch/dispatch.hpp"
#include "flashcore/flashcore.hpp"

namespace fctest {

using flashcore::DType;
using flashcore::Exp2Mode;
using flashcore::Strategy;
using flashcore::Tensor;

// Random numbers for one test. The run's base seed is fresh each process (or taken from
// FLASHCORE_TEST_SEED to replay a failure); each test mixes in its own name so that tests
// do not share streams and a replay reproduces every test of the run.
class Rng {
 public:
  Rng();
  double uniform(double lo, double hi);
  int64_t integer(int64_t lo, int64_t hi);  // inclusive
  // "seed S (replay: FLASHCORE_TEST_SEED=S)", for SCOPED_TRACE.
  std::string trace() const;

 private:
  std::mt19937_64 gen_;
};
uint64_t base_seed();

// Prints the seed with every failure of the enclosing scope.
#define FC_TRACE_SEED(rng) SCOPED_TRACE((rng).trace())

// An owned host tensor and its strided view. Memory order is given outermost first
// (`order`, default row-major); `pad` extra elements follow every innermost row, so
// views are not packed. The storage is 64-byte aligned; elements outside the view
// (padding) are NaN-poisoned at creation and by poison().
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape, std::vector<int> order = {}, int64_t pad = 0);
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  Tensor& view() { return view_; }
  const Tensor& view() const { return view_; }
  Tensor* ptr() { return &view_; }
  DType dtype() const { return view_.dtype; }
  int64_t numel() const { return view_.numel(); }
  const std::vector<int64_t>& shape() const { return shape_; }
  size_t bytes() const { return nbytes_; }
  const uint8_t* raw() const { return base_; }

  // Element at a logical row-major index, as double (f16/bf16 widened exactly).
  double get(int64_t linear) const;
  void set(int64_t linear, double v);  // rounds to the storage dtype
  // Storage offset (in elements) of a logical row-major index.
  int64_t offset(int64_t linear) const;

  void fill_uniform(Rng& rng, double lo, double hi);
  void fill_int(Rng& rng, int64_t lo, int64_t hi);  // i32 tensors
  void poison();                                   // every byte pattern a NaN
  // Copies of the whole storage, for "left untouched" checks.
  std::vector<uint8_t> snapshot() const { return {base_, base_ + nbytes_}; }
  // True when nothing outside the view's elements changed since creation / poison().
  bool padding_untouched() const;

 private:
  std::vector<uint8_t> buf_;
  uint8_t* base_ = nullptr;
  size_t nbytes_ = 0;
  std::vector<int64_t> shape_;
  Tensor view_;
};

// Contiguous f32 copy (the reference gets these so that its output is not rounded to
// f16/bf16: the truth is the exact answer for the rounded inputs).
HostTensor to_f32(const HostTensor& t);

// ||out - ref|| / ||ref|| over the logical elements, in double. Any NaN/inf in `out`
// gives +inf (never passes); an all-zero ref compares ||out|| absolutely.
double rel_err(const HostTensor& out, const HostTensor& ref);

// BENCH.md: fp32 exact-exp 1e-5, fp32 fast-exp 1e-2, f16/bf16 1e-2 (bf16 2e-2 at long Sk).
double tolerance(DType storage, Exp2Mode mode, int64_t sk);
// The looser of two dtypes' tolerances (a kernel whose operands are narrower than the
// storage rounds P and V to its operand dtype).
double tolerance(DType storage, DType kernel_ab, Exp2Mode mode, int64_t sk);

::testing::AssertionResult close(const HostTensor& out, const HostTensor& ref, double tol);

// lse: +-inf must match exactly, finite values within `tol` (absolute, lse is a log).
::testing::AssertionResult lse_close(const HostTensor& lse, const HostTensor& ref, double tol);

// The rules for hostile values (flashcore.hpp): where the reference is finite, ours is
// finite and within `tol` of it (relative norm over the finite elements); where it is not,
// ours is not either (a hidden key's NaN never reaches a row).
::testing::AssertionResult outputs_agree(const HostTensor& out, const HostTensor& ref, double tol);
// lse: -inf and NaN exactly where the reference has them; finite values close (relative:
// huge scores give huge lse).
::testing::AssertionResult lse_agree(const HostTensor& lse, const HostTensor& ref, double tol);

// Runs `call`, which must throw flashcore::Error with `status` and a message holding
// `needle`, and must leave every listed output's bytes untouched.
void expect_error(const std::function<void()>& call, flashcore::Status status, const std::string& needle,
                  std::vector<const HostTensor*> outputs);

// Skips the running test when the machine cannot run this GEMM micro-kernel (its ISA is
// absent), naming the ISA. Kernels that accumulate in fp16 (noepi) run through the
// pipelines too, checked at their operand dtype's tolerance.
#define FC_SKIP_UNLESS_RUNNABLE(k)                                                       \
  do {                                                                                   \
    if (!flashcore::cpu::isa_available((k).isa))                                         \
      GTEST_SKIP() << (k).key << " needs ISA " << flashcore::cpu::isa_name((k).isa)      \
                   << ", which this CPU lacks";                                          \
  } while (0)

// Base of per-kernel tests: the parameter indexes the GEMM kernel table (instantiate over
// ::testing::Range(0, gemm_ukernel_count()) named by KernelName); kernels this machine
// cannot run are skipped before the test body.
class KernelTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { FC_SKIP_UNLESS_RUNNABLE(kernel()); }
  const flashcore::cpu::GemmUkernel& kernel() const { return flashcore::cpu::gemm_ukernel(GetParam()); }
};
struct KernelName {
  template <class Info>
  std::string operator()(const Info& info) const { return flashcore::cpu::gemm_ukernel(info.param).key; }
};

// Strategy / mode / dtype names for test names and traces.
std::string name(DType d);
std::string name(Strategy s);
std::string name(Exp2Mode m);

// Test-name generator for (case, storage dtype) parameters: "<case>_<dtype>".
struct CaseDtypeName {
  template <class Info>
  std::string operator()(const Info& info) const {
    return std::string(std::get<0>(info.param).name) + "_" + name(std::get<1>(info.param));
  }
};

inline constexpr Strategy kStrategies[] = {Strategy::two_pass, Strategy::three_pass,
                                           Strategy::online, Strategy::automatic};
inline constexpr Exp2Mode kExpModes[] = {Exp2Mode::exact, Exp2Mode::fast};
inline constexpr DType kStorageTypes[] = {DType::f32, DType::f16, DType::bf16};

// Sets flashcore::set_force_generic for one scope.
class ForceGeneric {
 public:
  explicit ForceGeneric(bool on) : prev_(flashcore::force_generic()) { flashcore::set_force_generic(on); }
  ~ForceGeneric() { flashcore::set_force_generic(prev_); }
  ForceGeneric(const ForceGeneric&) = delete;
  ForceGeneric& operator=(const ForceGeneric&) = delete;

 private:
  bool prev_;
};

}  // namespace fctest
