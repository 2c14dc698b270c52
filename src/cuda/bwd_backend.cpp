// CUDA attention backward: validates what only the device can tell (pointer kinds,
// alignment, arch, shared memory, device-resident cu_seqlens), picks a bwd_sm90 or bwd_sm80
// instance (instances.inc's bwd rows) and runs, on the caller's stream:
//   memset     deterministic mode's counters, if any
//   prepare    per query row: D = rowsum(dO * O) and lse log2 e, its fp32 dQ accumulators
//              zeroed in every slice (bwd_aux.cu)
//   main       dK, dV, and dQ's sums (kernels/bwd_sm90.cuh, kernels/bwd_sm80.cuh)
//   finish     dQ = scale * sum of the slices, converted; varlen: dK, dV rows past the
//              last sequence zeroed (bwd_aux.cu)
// Every CUDA error becomes a flashcore::Error; nothing is launched until every check has
// passed. Workspace (from the per-device stream-ordered pool, back to it in stream order
// whatever launched): the row stats, nb H rows_q float2 (nb = B, or 1 for varlen; rows_q =
// Sq or the packed rows), rounded up to 16 bytes; then `splits` dQ slices of nb H rows_q hd
// floats (hd: the instance's head dim, D rounded up to 64, 96, 128 or 256).
// splits = 1 by default (every CTA adds into the one slice with atomic reductions); in
// deterministic mode on a bwd_sm90 row, while a sequence's key blocks fit the CTA slots, the
// CTAs add into the one slice in a fixed order, counted by nb' H ceil(Sq / block_m) 32-bit
// counters after the slices (nb' = B, the sequences when varlen; policy.hpp:
// deterministic_order); otherwise each CTA adds into a slice of its own (bwd_sm80.cuh), as
// many as there are CTAs along the keys (policy.hpp: deterministic_splits), at most
// kDeterministicBudget bytes of slices.
#include "cuda/bwd_backend.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "cuda/backend.hpp"
#include "cuda/kernels/bwd_params.hpp"
#include "cuda/launch.hpp"
#include "cuda/policy.hpp"
#include "cuda/problem_checks.hpp"
#include "cuda/workspace.hpp"

namespace flashcore::cuda {

using BwdLaunchFn = cudaError_t (*)(const BwdParams&, cudaStream_t);

// The kernels: bwd_aux.cu and one generated TU per bwd row of instances.inc (names = keys;
// sources.cmake lists the enabled ones in instances_bwd.inc).
cudaError_t bwd_prepare(const BwdParams&, bool bf16, cudaStream_t);
cudaError_t bwd_finish(const BwdParams&, bool bf16, cudaStream_t);
#define FC_SM80_INST(key, dt, hd, bm, bn, wp, st, oc, dqm, ds, qs) cudaError_t key(const BwdParams&, cudaStream_t);
#define FC_SM90_INST(key, dt, hd, bm, bn, st, ps) cudaError_t key(const BwdParams&, cudaStream_t);
#include "instances_bwd.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST

namespace {

// The rows as the policy sees them (policy.hpp: pick_bwd) and, in the same order, their
// launchers.
const BwdInstanceInfo kBwdRows[] = {
#define FC_SM80_INST FC_SM80_BWD_INSTANCE_INFO
#define FC_SM90_INST FC_SM90_BWD_INSTANCE_INFO
#include "instances_bwd.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};
#define FC_BWD_LAUNCHER(key, ...) key,
const BwdLaunchFn kBwdFns[] = {
#define FC_SM80_INST FC_BWD_LAUNCHER
#define FC_SM90_INST FC_BWD_LAUNCHER
#include "instances_bwd.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};
#undef FC_BWD_LAUNCHER
static_assert(sizeof(kBwdRows) / sizeof(kBwdRows[0]) == sizeof(kBwdFns) / sizeof(kBwdFns[0]), "one launcher per row");

// Deterministic mode: the dQ slices take at most this many bytes (fewer slices beyond it;
// one slice always).
constexpr size_t kDeterministicBudget = size_t(1) << 30;

const BwdInstanceInfo& pick(const core::AttentionProblem& p, int64_t sk, bool deterministic, const DeviceInfo& dev) {
  const BwdPick r = pick_bwd(p, sk, deterministic, dev, kBwdRows);
  if (r.inst == nullptr) throw_error(Status::unsupported, r.why);
  return *r.inst;
}
BwdLaunchFn launcher(const BwdInstanceInfo& i) { return kBwdFns[&i - kBwdRows]; }

// Pointers, head dims and alignment: q, k, v, out and dout are read 16 bytes at a time
// (cp.async, vector loads), dq, dk and dv written in pairs (4 bytes).
void check_backward(const core::AttentionBackwardProblem& bp, const DeviceInfo& dev) {
  const core::AttentionProblem& p = bp.fwd;
  check_pointers(p, dev);
  check_device_pointer(bp.dout.data, "dout", dev.id);
  check_device_pointer(bp.dq.data, "dq", dev.id);
  check_device_pointer(bp.dk.data, "dk", dev.id);
  check_device_pointer(bp.dv.data, "dv", dev.id);
  if (p.d % 8 != 0 || p.dv % 8 != 0)
    throw_error(Status::unsupported, "q: head dims D = " + std::to_string(p.d) + ", Dv = " + std::to_string(p.dv) +
                                         " must be multiples of 8 for the CUDA backward");
  check_kernel_limits(p);
  refuse_score_variants(p, "the CUDA backward");
  const int64_t es = int64_t(dtype_size(p.dtype)), nb = p.cu_q != nullptr ? 1 : p.batch;
  const int64_t sq = bp.rows_q, sk = bp.rows_k;
  // (an operand without elements, Dv = 0's v, out, dout and dv, is never read or written:
  // its strides need no alignment)
  const bool values = p.dv > 0;
  struct Check { const char* name; bool read; std::string why; };
  const Check checks[] = {
      {"q", true, misalignment(p.q.data, 16, es, {{p.q.sb, nb}, {p.q.ss, sq}, {p.q.sh, p.heads}})},
      {"k", true, misalignment(p.k.data, 16, es, {{p.k.sb, nb}, {p.k.ss, sk}, {p.k.sh, p.kv_heads}})},
      {"v", values, misalignment(p.v.data, 16, es, {{p.v.sb, nb}, {p.v.ss, sk}, {p.v.sh, p.kv_heads}})},
      {"out", values, misalignment(p.o, 16, es, {{p.o_sb, nb}, {p.o_ss, sq}, {p.o_sh, p.heads}})},
      {"dout", values, misalignment(bp.dout.data, 16, es, {{bp.dout.sb, nb}, {bp.dout.ss, sq}, {bp.dout.sh, p.heads}})},
      {"dq", true, misalignment(bp.dq.data, 4, es, {{bp.dq.sb, nb}, {bp.dq.ss, sq}, {bp.dq.sh, p.heads}})},
      {"dk", true, misalignment(bp.dk.data, 4, es, {{bp.dk.sb, nb}, {bp.dk.ss, sk}, {bp.dk.sh, p.kv_heads}})},
      {"dv", values, misalignment(bp.dv.data, 4, es, {{bp.dv.sb, nb}, {bp.dv.ss, sk}, {bp.dv.sh, p.kv_heads}})},
  };
  for (const Check& c : checks)
    if (c.read && !c.why.empty()) throw_error(Status::invalid_argument, std::string(c.name) + ": " + c.why);
}

// Query rows of all heads (the row stats) and one dQ slice's bytes.
size_t query_rows(const BwdParams& b) { return size_t(b.nb) * size_t(b.f.heads) * size_t(b.rows_q); }
size_t slice_bytes_of(const BwdParams& b) { return query_rows(b) * size_t(b.acc_ld) * 4; }

// The launches of one call; the workspace goes back to the pool whatever launched, and the
// first failure is named.
void run(const BwdInstanceInfo& inst, BwdParams& b, const DeviceInfo& dev, cudaStream_t stream) {
  const bool bf16 = inst.dtype == DType::bf16;
  const size_t stat_bytes = (query_rows(b) * 8 + 15) / 16 * 16, slice_bytes = slice_bytes_of(b);
  const size_t sem_bytes = size_t(b.f.batch) * size_t(b.f.heads) * size_t(b.sem_mblocks) * 4;
  const size_t total = stat_bytes + size_t(b.splits) * slice_bytes + sem_bytes;
  char* ws = nullptr;
  if (total > 0) {
    const cudaError_t ea =
        cudaMallocFromPoolAsync(reinterpret_cast<void**>(&ws), total, workspace_pool(dev.id), stream);
    if (ea != cudaSuccess) cuda_fail(Status::device_error, "q: allocating the backward's workspace failed", ea);
  }
  b.rowstat = reinterpret_cast<float2*>(ws);
  b.dq_acc = reinterpret_cast<float*>(ws + stat_bytes);
  b.dq_sem = sem_bytes > 0 ? reinterpret_cast<unsigned*>(ws + stat_bytes + size_t(b.splits) * slice_bytes) : nullptr;
  // (the dQ slices are zeroed by bwd_row_stats, in the same launch; the counters here)
  const char* what = "the dQ counters' memset";
  cudaError_t e = sem_bytes > 0 ? cudaMemsetAsync(b.dq_sem, 0, sem_bytes, stream) : cudaSuccess;
  if (e == cudaSuccess) {
    what = "bwd_row_stats";
    e = bwd_prepare(b, bf16, stream);
  }
  if (e == cudaSuccess && b.key_ctas > 0 && b.kv_heads > 0 && b.f.batch > 0) {
    what = inst.key;
    e = launcher(inst)(b, stream);
  }
  if (e == cudaSuccess) {
    what = "bwd_dq_store / bwd_zero_tail";
    e = bwd_finish(b, bf16, stream);
  }
  const cudaError_t ef = ws != nullptr ? cudaFreeAsync(ws, stream) : cudaSuccess;
  if (e != cudaSuccess) cuda_fail(Status::device_error, std::string("CUDA kernel ") + what + " failed to launch", e);
  if (ef != cudaSuccess) cuda_fail(Status::device_error, "q: freeing the backward's workspace failed", ef);
}

}  // namespace

void attention_backward(const core::AttentionBackwardProblem& bp) {
  const core::AttentionProblem& p = bp.fwd;
  const DeviceInfo dev = device_info(true);
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    throw_error(Status::unsupported, std::string("q: attention_backward on CUDA tensors takes f16 or bf16, got ") +
                                         to_string(p.dtype) + " (fp32 storage: the CPU backend)");
  check_backward(bp, dev);
  int64_t sq = p.sq, sk = p.sk;
  longest_sequences(p, &sq, &sk);
  const BwdInstanceInfo& inst = pick(p, sk, bp.deterministic, dev);

  BwdParams b;
  b.f = fwd_params(p, sq, sk, dev);
  b.dout = bp.dout.data;
  b.do_sb = bp.dout.sb, b.do_ss = bp.dout.ss, b.do_sh = bp.dout.sh;
  b.dq = bp.dq.data, b.dk = bp.dk.data, b.dv = bp.dv.data;
  b.dq_sb = bp.dq.sb, b.dq_ss = bp.dq.ss, b.dq_sh = bp.dq.sh;
  b.dk_sb = bp.dk.sb, b.dk_ss = bp.dk.ss, b.dk_sh = bp.dk.sh;
  b.dv_sb = bp.dv.sb, b.dv_ss = bp.dv.ss, b.dv_sh = bp.dv.sh;
  b.scale = p.scale;
  b.kv_heads = int(p.kv_heads);
  b.nb = p.cu_q != nullptr ? 1 : int(p.batch);
  b.rows_q = int(bp.rows_q);
  b.rows_k = int(bp.rows_k);
  b.acc_ld = inst.head_dim;
  b.dq_swizzled = inst.arch == 90;
  b.acc_panel = inst.arch == 90 && bwd_sm90_wide(inst.head_dim) ? 128 : inst.head_dim;
  const int key_blocks = int((sk + inst.block_n - 1) / inst.block_n);
  b.key_ctas = key_blocks;
  const int order = bp.deterministic ? deterministic_order(inst, b.f.window_left, b.f.window_right, key_blocks,
                                                          dev.sms * inst.ctas_per_sm())
                                     : 0;
  if (order > 0) {
    b.dq_order = order;
    b.sem_mblocks = int((sq + inst.block_m - 1) / inst.block_m);
  } else if (bp.deterministic) {
    const size_t slice_bytes = slice_bytes_of(b);
    const int64_t most = slice_bytes > 0 ? int64_t(kDeterministicBudget / slice_bytes) : key_blocks;
    b.splits = deterministic_splits(p.batch * p.kv_heads * inst.dsplit, key_blocks, most, dev.sms * inst.ctas_per_sm());
    b.key_ctas = key_blocks > 0 ? b.splits : 0;
    b.dq_split = int64_t(slice_bytes / 4);
  }
  if (b.nb == 0) return;  // (no query heads: the main kernel still writes dK = dV = 0)
  if (query_rows(b) >= (size_t(1) << 31))  // (bwd_aux.cu's row kernels count them in 32 bits)
    throw_error(Status::unsupported, "q: batch x heads x query rows = " + std::to_string(query_rows(b)) +
                                         " must be below 2^31 for the CUDA backward");
  run(inst, b, dev, static_cast<cudaStream_t>(p.stream));
}

void append_backward_kernels(std::vector<KernelInfo>& out, const DeviceInfo* dev) {
  for (const BwdInstanceInfo& i : kBwdRows)
    out.push_back({i.key, i.arch == 90 ? "sm90" : "sm80", dev != nullptr && i.runs_on(*dev)});
}

}  // namespace flashcore::cuda
