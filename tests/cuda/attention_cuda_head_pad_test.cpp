// CUDA backend vs the fp64 reference, 16-bit head dims that are not multiples of 8: q, k
// and v copied with zero-padded head dims, the padded problem on the tensor-core kernels,
// O's columns copied back (backend.cpp: attention_head_padded; the kernel name says
// "+hpad"). D and Dv from 1 to 255, D != Dv, odd and unequal lengths, causal bottom-right,
// windows, GQA/MQA, BHSD and padded rows (strides that no 16-byte load could take), lse,
// varlen, CUDA graph capture. On sm90, the same in place where the tensors' rows are
// 16-byte aligned ([B, S, H, D] with H D a multiple of 8: "+hcols", InPlace). Every test
// skips with a message when there is no sm80+ GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "attention_cuda_test_util.hpp"
#include "common/test_util.hpp"
#include "cuda_test_util.hpp"
#include "flashcore/flashcore.hpp"

namespace {

using flashcore::DType;
using fctest::cuda_fwd::Case;
using fctest::cuda_fwd::kVarlenK;
using fctest::cuda_fwd::kVarlenQ;
using fctest::cuda_fwd::run_case;
using fctest::cuda_fwd::varlen_case;

class CudaHeadPad : public ::testing::TestWithParam<DType> {};

TEST_P(CudaHeadPad, HeadDimsAndOddLengths) {
  FC_REQUIRE_GPU();
  for (int64_t D : {1, 7, 59, 111, 200, 255})
    for (int64_t S : {1, 7, 300})
      for (bool causal : {false, true}) {
        Case c;
        c.dtype = GetParam();
        c.D = D;
        c.Sq = S;
        c.Sk = S == 300 ? 333 : S;
        c.causal = causal;
        // (D = 200: a multiple of 8, on its instance in place; one row, S = 1, has 16-byte
        // aligned rows whatever D is, and runs in place on sm90 where its head dims fit)
        c.expect_hpad = D % 8 != 0 && S > 1;
        run_case(c);
      }
}

TEST_P(CudaHeadPad, UnequalHeadDims) {
  FC_REQUIRE_GPU();
  for (auto [D, Dv] : {std::pair<int64_t, int64_t>{59, 33}, {111, 64}, {64, 59}, {192, 129}, {3, 256}}) {
    Case c;
    c.dtype = GetParam();
    c.D = D;
    c.Dv = Dv;
    c.Sq = 130;
    c.Sk = 257;
    c.causal = true;
    c.expect_hpad = true;
    run_case(c);
  }
}

TEST_P(CudaHeadPad, MasksGqaAndLayouts) {
  FC_REQUIRE_GPU();
  for (int layout = 0; layout < 3; ++layout)
    for (auto [H, Hkv] : {std::pair<int64_t, int64_t>{8, 2}, {4, 1}}) {
      Case c;
      c.dtype = GetParam();
      c.B = 2;
      c.H = H;
      c.Hkv = Hkv;
      c.D = 80 + 1;
      c.Sq = 200;
      c.Sk = 150;
      c.wl = 40;
      c.wr = 7;
      c.bhsd = layout == 1;
      c.pad = layout == 2 ? 3 : 0;  // rows 3 elements apart from the next: no alignment at all
      c.lse = layout != 1;
      c.expect_hpad = true;
      run_case(c);
    }
}

// Rows 16-byte aligned though D is not a multiple of 8 (H D is): on sm90 in place, no
// copies (attention_head_columns), the tiles reading the neighbouring heads' columns; D and
// Dv apart (one of them a multiple of 8: V, or Q and K, in place by their own heads' maps),
// GQA with V in place, windows, row padding that aligns the rows, lse on and off. Where a
// head's columns, from their offset in a 16-byte chunk, do not fit the widest kernel (D 255:
// 255 + 7 > 256), or GQA meets Q and K in columns, or the policy's row is an sm80 one
// (D 200, Dv 129), the copies; the copies off sm90 too.
TEST_P(CudaHeadPad, InPlace) {
  FC_REQUIRE_GPU();
  const bool sm90 = fctest::sm90_missing().empty();
  struct Dims {
    int64_t H, Hkv, D, Dv, pad;
    bool in_place;
  };
  for (const Dims& x : {Dims{8, 8, 1, 1, 0, true}, Dims{8, 8, 7, 7, 0, true}, Dims{8, 8, 59, 59, 0, true},
                        Dims{8, 8, 111, 111, 0, true}, Dims{8, 8, 255, 255, 0, false}, Dims{16, 4, 64, 58, 0, true},
                        Dims{16, 4, 58, 58, 0, false}, Dims{8, 8, 59, 33, 0, true}, Dims{8, 8, 64, 111, 0, true},
                        Dims{8, 8, 111, 64, 0, true}, Dims{8, 8, 200, 129, 0, false}, Dims{2, 2, 111, 111, 1, true},
                        Dims{4, 4, 81, 81, 7, true}})
    for (bool causal : {false, true}) {
      Case c;
      c.dtype = GetParam();
      c.B = 2;
      c.H = x.H;
      c.Hkv = x.Hkv;
      c.D = x.D;
      c.Dv = x.Dv;
      c.pad = x.pad;  // (1 after a row of 111, 7 after one of 81: head strides 112 and 88)
      c.Sq = causal ? 130 : 300;
      c.Sk = causal ? 257 : 333;
      c.causal = causal;
      if (x.H == 16) c.wl = 40, c.wr = 7;
      c.lse = !causal || x.H != 16;
      c.expect_hcols = sm90 && x.in_place;
      c.expect_hpad = !c.expect_hcols;
      run_case(c);
    }
}

TEST_P(CudaHeadPad, Varlen) {
  FC_REQUIRE_GPU();
  for (int64_t D : {59, 111}) {
    SCOPED_TRACE(D);
    varlen_case(GetParam(), D, "");
  }
}

TEST_P(CudaHeadPad, VarlenInCudaGraph) {
  FC_REQUIRE_GPU();
  varlen_case(GetParam(), 59, "", 4, kVarlenQ, kVarlenK, "", 0, /*graph=*/true);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaHeadPad, ::testing::Values(DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(fctest::name(i.param)); });

}  // namespace
