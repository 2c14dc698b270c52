// The bad inputs of merge_states through the C++ API: each is refused with flashcore::Error
// naming the argument, and every output (and every part) keeps its bytes.
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.hpp"

namespace fctest {
namespace {

namespace fc = flashcore;
using fc::Status;

// ---------------------------------------------------------------- merge_states

// Three valid parts (B=2, S=3, H=4, D=8; f16 parts, f32 output) whose views each case then
// breaks in one way.
struct MergeCall {
  HostTensor o0{DType::f16, {2, 3, 4, 8}}, o1{DType::f16, {2, 3, 4, 8}}, o2{DType::f16, {2, 3, 4, 8}};
  HostTensor l0{DType::f32, {2, 4, 3}}, l1{DType::f32, {2, 4, 3}}, l2{DType::f32, {2, 4, 3}};
  HostTensor out{DType::f32, {2, 3, 4, 8}}, lse{DType::f32, {2, 4, 3}};
  std::vector<Tensor> ov, lv;
  Tensor outv, lsev;
  int64_t n = 3;
  fc::MergeStatesParams p;
  bool pair = false;

  MergeCall() {
    Rng rng;
    for (HostTensor* t : {&o0, &o1, &o2, &l0, &l1, &l2}) t->fill_uniform(rng, -1, 1);
    ov = {o0.view(), o1.view(), o2.view()};
    lv = {l0.view(), l1.view(), l2.view()};
    outv = out.view();
    lsev = lse.view();
  }
  void run() {
    if (pair) fc::merge_states(ov[0], lv[0], ov[1], lv[1], outv, lsev, p);
    else fc::merge_states(ov.data(), lv.data(), n, outv, lsev, p);
  }
};

struct MergeCase {
  const char* name;
  std::function<void(MergeCall&)> breakit;
  Status status;
  const char* needle;
};

const MergeCase kMergeCases[] = {
    {"no_parts", [](MergeCall& c) { c.n = 0; }, Status::invalid_argument, "n:"},
    {"part_head_dim", [](MergeCall& c) { c.ov[1].shape[3] = 4; }, Status::invalid_argument, "out_parts[1]"},
    {"pair_names_out_b", [](MergeCall& c) { c.pair = true; c.ov[1].shape[2] = 2; }, Status::invalid_argument, "out_b"},
    {"part_rank", [](MergeCall& c) { c.ov[2].rank = 3; }, Status::invalid_argument, "out_parts[2]"},
    {"parts_mixed_dtype", [](MergeCall& c) { c.ov[2].dtype = DType::bf16; }, Status::invalid_argument,
     "out_parts[2]: dtype"},
    {"lse_part_dtype", [](MergeCall& c) { c.lv[0].dtype = DType::f16; }, Status::invalid_argument, "lse_parts[0]"},
    {"pair_names_lse_a", [](MergeCall& c) { c.pair = true; c.lv[0].shape[1] = 3; }, Status::invalid_argument, "lse_a"},
    {"lse_part_seq", [](MergeCall& c) { c.lv[1].shape[2] = 2; }, Status::invalid_argument, "lse_parts[1]"},
    {"out_dtype_i32", [](MergeCall& c) { c.outv.dtype = DType::i32; }, Status::unsupported, "out: dtype i32"},
    {"lse_dtype", [](MergeCall& c) { c.lsev.dtype = DType::bf16; }, Status::invalid_argument, "lse: must be f32"},
    {"lse_shape", [](MergeCall& c) { c.lsev.shape[1] = 5; }, Status::invalid_argument, "lse: dim 1"},
    {"out_null", [](MergeCall& c) { c.outv.data = nullptr; }, Status::invalid_argument, "out: data is a null"},
    {"out_overlaps_part", [](MergeCall& c) {
       c.ov[1] = c.outv;  // part 1 read from out's memory one element later
       c.ov[1].dtype = DType::f16;
       c.ov[1].data = static_cast<char*>(c.outv.data) + 4;
     }, Status::invalid_argument, "out: overlaps out_parts[1]"},
    {"out_is_part_other_dtype", [](MergeCall& c) { c.outv = c.ov[0]; c.outv.dtype = DType::bf16; },
     Status::invalid_argument, "out: overlaps out_parts[0]"},
    {"out_overlaps_lse_part", [](MergeCall& c) { c.lv[2].data = c.outv.data; }, Status::invalid_argument,
     "out: overlaps lse_parts[2]"},
    {"lse_overlaps_out", [](MergeCall& c) { c.lsev.data = static_cast<float*>(c.outv.data) + 7; },
     Status::invalid_argument, "lse: overlaps out"},
    {"lse_overlaps_part", [](MergeCall& c) { c.lsev.data = c.ov[1].data; }, Status::invalid_argument,
     "lse: overlaps out_parts[1]"},
    {"out_self_overlap", [](MergeCall& c) { c.outv.strides[2] = 0; }, Status::invalid_argument, "out: shape"},
    {"part_device", [](MergeCall& c) { c.ov[1].device = fc::Device::cuda; }, Status::invalid_argument,
     "out_parts[1]: is on cuda"},
    {"threads", [](MergeCall& c) { c.p.threads = -1; }, Status::invalid_argument, "params.threads"},
    {"cuda", [](MergeCall& c) {
       for (Tensor* t : {&c.ov[0], &c.ov[1], &c.ov[2], &c.lv[0], &c.lv[1], &c.lv[2], &c.outv, &c.lsev})
         t->device = fc::Device::cuda;
     }, Status::unsupported, "merge_states takes CPU tensors only"},
};

class MergeStatesErrorTest : public ::testing::TestWithParam<MergeCase> {};

TEST_P(MergeStatesErrorTest, RefusedBeforeAnyWrite) {
  MergeCall c;
  GetParam().breakit(c);
  expect_error([&] { c.run(); }, GetParam().status, GetParam().needle,
               {&c.out, &c.lse, &c.o0, &c.o1, &c.o2, &c.l0, &c.l1, &c.l2});
}

INSTANTIATE_TEST_SUITE_P(Api, MergeStatesErrorTest, ::testing::ValuesIn(kMergeCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(MergeStatesError, ValidCallAndInPlacePass) {
  MergeCall c;
  EXPECT_NO_THROW(c.run());
  c.outv = c.ov[0];  // in place: out is exactly part 0, lse lse part 2
  c.lsev = c.lv[2];
  EXPECT_NO_THROW(c.run());
}

}  // namespace
}  // namespace fctest
