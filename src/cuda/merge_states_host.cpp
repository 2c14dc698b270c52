// merge_states on CUDA tensors (src/api/serving.cpp calls it): the parts and outputs must be
// memory of the current device; the parts go into the kernel's arguments (merge_states.cu).
#include <cstdint>
#include <string>

#include "core/errors.hpp"
#include "cuda/backend.hpp"
#include "cuda/device.hpp"
#include "cuda/merge_states.hpp"

namespace flashcore::cuda {

void merge_states(const core::MergeProblem& p) {
  if (p.n > MergeArgs::kMaxParts)
    throw_error(Status::unsupported, "n: merge_states on CUDA tensors takes at most " +
                                         std::to_string(MergeArgs::kMaxParts) + " parts, got " + std::to_string(p.n));
  const DeviceInfo dev = device_info(false);
  MergeArgs a{};
  for (int64_t s = 0; s < p.n; ++s) {
    const core::StatePart& sp = p.parts[s];
    check_device_pointer(sp.o.data, ("out_parts[" + std::to_string(s) + "]").c_str(), dev.id);
    check_device_pointer(sp.lse, ("lse_parts[" + std::to_string(s) + "]").c_str(), dev.id);
    a.parts[s] = {sp.o.data, sp.o.sb, sp.o.ss, sp.o.sh, sp.lse, sp.lse_sb, sp.lse_sh};
  }
  check_device_pointer(p.o, "out", dev.id);
  check_device_pointer(p.lse, "lse", dev.id);
  a.rows = p.batch * p.s * p.heads;
  if (a.rows == 0) return;
  if (a.rows / 4 >= int64_t(INT32_MAX))
    throw_error(Status::unsupported, "out: B x S x H = " + std::to_string(a.rows) + " rows are too many for one launch");
  a.n = int(p.n);
  a.o = p.o;
  a.o_sb = p.o_sb;
  a.o_ss = p.o_ss;
  a.o_sh = p.o_sh;
  a.lse = p.lse;
  a.lse_sb = p.lse_sb;
  a.lse_sh = p.lse_sh;
  a.s = p.s;
  a.heads = p.heads;
  a.d = p.d;
  const cudaError_t e = launch_merge_states(a, p.part_dtype, p.out_dtype, static_cast<cudaStream_t>(p.stream));
  if (e != cudaSuccess) cuda_fail(Status::device_error, "CUDA kernel merge_states failed to launch", e);
}

}  // namespace flashcore::cuda
