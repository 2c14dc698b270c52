// CUDA backend: validates what only the device can tell (pointer kinds, alignment, arch,
// shared memory, device-resident cu_seqlens), asks the policy (policy.hpp) for a kernel among
// this build's instances (registry.hpp) or takes the forced one, and launches (launch.hpp) on
// the caller's stream. Every CUDA error becomes a flashcore::Error; nothing is launched until
// every check has passed.
#include "cuda/backend.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/env.hpp"
#include "core/errors.hpp"
#include "cuda/bwd_backend.hpp"
#include "cuda/device.hpp"
#include "cuda/head_pad.hpp"
#include "cuda/kernels/params.hpp"
#include "cuda/launch.hpp"
#include "cuda/parts/fp8.hpp"
#include "cuda/policy.hpp"
#include "cuda/problem_checks.hpp"
#include "cuda/registry.hpp"
#include "cuda/workspace.hpp"

namespace flashcore::cuda {
namespace {

constexpr int kMaxHeadDim = 256;

// The q/k/v (16 bytes) and out (4 bytes) alignment the tensor-core kernels need; the
// first violation, or "" when none.
std::string tensor_core_misalignment(const core::AttentionProblem& p, std::string* which) {
  const int64_t es = int64_t(dtype_size(p.dtype)), nb = p.cu_q != nullptr ? 1 : p.batch;
  const std::pair<const char*, std::string> checks[] = {
      {"q", misalignment(p.q.data, 16, es, {{p.q.sb, nb}, {p.q.ss, p.sq}, {p.q.sh, p.heads}})},
      {"k", misalignment(p.k.data, 16, es, {{p.k.sb, nb}, {p.k.ss, p.sk}, {p.k.sh, p.kv_heads}})},
      {"v", misalignment(p.v.data, 16, es, {{p.v.sb, nb}, {p.v.ss, p.sk}, {p.v.sh, p.kv_heads}})},
      {"out", misalignment(p.o, 4, int64_t(dtype_size(p.out_dtype)), {{p.o_sb, nb}, {p.o_ss, p.sq}, {p.o_sh, p.heads}})},
  };
  for (const auto& [name, why] : checks)
    if (!why.empty()) {
      *which = name;
      return why;
    }
  return {};
}

// Whether the sm90 kernels may write O with TMA stores: fixed-length batches and 16-byte
// aligned base and strides (checked here, so that no tensor-map encode fails on the way).
bool o_tma_mappable(const core::AttentionProblem& p) {
  return p.cu_q == nullptr &&
         misalignment(p.o, 16, int64_t(dtype_size(p.out_dtype)),
                      {{p.o_sb, p.batch}, {p.o_ss, p.sq}, {p.o_sh, p.heads}}).empty();
}

// A forced key's "+kv<N>" (kv_splits > 1) on a kernel that takes no splits.
void check_forced_splits(const char* impl, int kv_splits, const InstanceInfo& i) {
  if (kv_splits > 1 && !kv_splittable(i))
    throw_error(Status::unsupported,
                std::string("params.impl: '") + impl + "': KV splits run on the sm90 kernels without '_p'");
}

// A forced key's kernel (inst, or the FFMA kernel's key) that takes another dtype than the
// tensors' (dt): refused, naming params.impl.
void check_forced_dtype(const char* impl, const InstanceInfo* inst, bool simt, DType dt) {
  const DType kernel_dt = simt ? DType::f32 : inst != nullptr ? inst->dtype : dt;
  if (kernel_dt != dt)
    throw_error(Status::unsupported, std::string("params.impl: '") + impl + "' is a kernel for " +
                                         to_string(kernel_dt) + " tensors; q, k and v are " + to_string(dt));
}

// A forced key, "<key>" or "<key>+kv<N>": the key into *key, N (1 .. 64) returned, 1 without.
int forced_key(const char* impl, std::string* key) {
  *key = impl;
  const size_t kv = key->rfind("+kv");
  if (kv == std::string::npos || kv == 0) return 1;
  char* end = nullptr;
  const long n = std::strtol(key->c_str() + kv + 3, &end, 10);
  if (*end != '\0' || n < 1 || n > 64)
    throw_error(Status::unsupported, std::string("params.impl: '") + impl + "': the KV split count must be 1 .. 64");
  key->resize(kv);
  return int(n);
}

// The e4m3 head dims of this build, for a message.
std::string fp8_head_dims() {
  std::string dims;
  for (const InstanceInfo& i : instances())
    if (i.arch == 90 && i.dtype == DType::e4m3) {
      const std::string hd = std::to_string(i.head_dim);
      if ((", " + dims + ", ").find(", " + hd + ", ") == std::string::npos) dims += (dims.empty() ? "" : ", ") + hd;
    }
  return dims;
}

// fp8 (e4m3) q/k/v: the Hopper kernel only (the e4m3 rows of the sm90 family), D == Dv ==
// the row's head dim, f16/bf16 output; the V^T pre-pass or the kernel's own transposer
// (launch), GQA packing, KV splits and varlen batches as for the 16-bit kernels.
void attention_fp8(const core::AttentionProblem& p, const DeviceInfo& dev, PhaseTimes* times) {
  if (!dev.hopper())
    throw_error(Status::unsupported, "q: dtype e4m3 runs on the Hopper kernels only (compute capability 9.0); device " +
                                         std::to_string(dev.id) + " is sm" + std::to_string(dev.major) +
                                         std::to_string(dev.minor));
  check_pointers(p, dev);
  check_device_pointer(p.q_descale_heads, "params.q_descale_heads", dev.id);
  check_device_pointer(p.k_descale_heads, "params.k_descale_heads", dev.id);
  check_device_pointer(p.v_descale_heads, "params.v_descale_heads", dev.id);
  if (p.tile_m != 0)
    throw_error(Status::unsupported, "params.tile_m: the e4m3 kernels have no tile choice (leave tile_m/tile_n 0)");
  int64_t sq = p.sq, sk = p.sk;  // the longest sequences
  longest_sequences(p, &sq, &sk);
  KernelChoice choice = choose_kernel_fp8(p, sq, sk, dev, instances());
  if (p.impl != nullptr && p.impl[0] != '\0') {  // a forced key runs unsplit or names a count
    std::string key;
    const int kv_splits = forced_key(p.impl, &key);
    const InstanceInfo* inst = find_key(key.c_str());
    check_forced_dtype(p.impl, inst, key == kSimtKey, DType::e4m3);
    if (inst == nullptr || inst->arch != 90 || inst->dtype != DType::e4m3 || p.d != inst->head_dim ||
        p.dv != inst->head_dim || inst->smem() > dev.smem_optin)
      throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' is not an e4m3 kernel of this build for D = " +
                                           std::to_string(p.d) + ", Dv = " + std::to_string(p.dv));
    check_forced_splits(p.impl, kv_splits, *inst);
    choice = complete_choice(p, sq, sk, dev, inst, kv_splits);
  }
  if (fp8_head_dims().empty())
    throw_error(Status::unsupported, "q: dtype e4m3 has no CUDA kernel in this build (FLASHCORE_CUDA_DTYPES, "
                                     "FLASHCORE_CUDA_ARCHS with 90)");
  if (choice.inst == nullptr)
    throw_error(Status::unsupported, "q: head dims D = " + std::to_string(p.d) + ", Dv = " + std::to_string(p.dv) +
                                         ": the e4m3 kernels of this build take D == Dv in {" + fp8_head_dims() + "}");
  const InstanceInfo& inst = *choice.inst;
  std::string bad_tensor;
  const std::string bad_align = tensor_core_misalignment(p, &bad_tensor);
  if (!bad_align.empty()) throw_error(Status::invalid_argument, bad_tensor + ": " + bad_align);
  check_kernel_limits(p);
  refuse_score_variants(p, "the e4m3 (sm90) kernels");

  FwdParams f = fwd_params(p, sq, sk, dev);
  f.out_bf16 = p.out_dtype == DType::bf16;
  f.exp_chord = p.exp2 == Exp2Mode::fast && p.lse == nullptr && inst.chord;
  f.o_tma = o_tma_mappable(p);
  f.vt_sk = p.cu_q != nullptr ? int64_t(fp8_vt_row0(p.sk, p.batch))
                               : std::max<int64_t>((p.sk + kFp8VtKeyAlign - 1) / kFp8VtKeyAlign * kFp8VtKeyAlign, kFp8VtKeyAlign);
  f.pack_shift = choice.pack_shift;
  f.kv_splits = choice.kv_splits;
  name_kernel(times, inst.key, f);
  if (p.batch == 0 || p.heads == 0 || sq == 0) return;
  launch(p, dev, inst, f, static_cast<cudaStream_t>(p.stream));
}

// A forced key for a 16-bit or f32 problem (not the FFMA kernel's): its instance and split
// count, after the checks that it takes the problem.
KernelChoice forced_choice(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceInfo& dev, int64_t hd,
                           bool dims_ok, const std::string& bad_tensor, const std::string& bad_align) {
  const bool f32 = p.dtype == DType::f32;
  std::string key;
  const int kv_splits = forced_key(p.impl, &key);
  const InstanceInfo* inst = find_key(key.c_str());
  check_forced_dtype(p.impl, inst, key == kSimtKey, p.dtype);
  if (inst != nullptr) check_forced_splits(p.impl, kv_splits, *inst);
  if (inst != nullptr && inst->arch == 90) {
    const std::string why = sm90_refusal(p, *inst, dev);
    if (!why.empty()) throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' " + why);
  }
  if (inst == nullptr || inst->dtype != p.dtype || inst->head_dim < hd)
    throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' is not a CUDA kernel of this build for " +
                                         to_string(p.dtype) + " head dim " + std::to_string(hd) +
                                         (f32 ? std::string(" (or ") + kSimtKey + ")" : std::string()));
  if (inst->smem() > dev.smem_optin)
    throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' needs more shared memory than this device has");
  if (f32 && p.exact_fp32)
    throw_error(Status::invalid_argument, std::string("params.impl: '") + p.impl +
                                              "' runs on TF32 tensor cores, but params.exact_fp32 asks for exact fp32");
  if (f32 && !dims_ok)
    throw_error(Status::unsupported, std::string("params.impl: '") + p.impl + "' needs head dims that are multiples of 4 (D = " +
                                         std::to_string(p.d) + ", Dv = " + std::to_string(p.dv) + ")");
  if (f32 && !bad_align.empty()) throw_error(Status::invalid_argument, bad_tensor + ": " + bad_align);
  return complete_choice(p, sq, sk, dev, inst, kv_splits);
}

// The policy's choice for a 16-bit or f32 problem without a forced key; throws where the
// sm80 family has no row for it.
KernelChoice policy_choice(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceInfo& dev) {
  const Choice16 c = choose_kernel(p, sq, sk, dev, instances());
  const Sm80Pick& s = c.sm80;
  switch (s.why) {
    case Sm80Pick::Why::ok:
      break;
    case Sm80Pick::Why::no_head_dim:
      throw_error(Status::unsupported, "q: head dim " + std::to_string(s.head_dim) + " (" + to_string(p.dtype) +
                                           ") has no CUDA instance in this build (FLASHCORE_CUDA_HDIMS/DTYPES)");
    case Sm80Pick::Why::no_tile:
      throw_error(Status::unsupported, "params.tile_m: no CUDA instance with tile " + std::to_string(p.tile_m) + "x" +
                                           std::to_string(p.tile_n) + " for " + to_string(p.dtype) + " head dim " +
                                           std::to_string(s.head_dim) + " that fits this device");
    case Sm80Pick::Why::no_fit:
      throw_error(Status::unsupported, "q: no CUDA instance for head dim " + std::to_string(s.head_dim) +
                                           " fits this device's shared memory (" + std::to_string(dev.smem_optin) +
                                           " bytes)");
  }
  return c.kernel;
}

}  // namespace

namespace {

// A checked 16-bit or f32 call: the kernel and its parameters (inst null: the exact FFMA
// kernel). `empty`: nothing to launch (a zero-sized problem).
struct FwdPlan {
  KernelChoice choice;
  FwdParams f;
  bool empty = false;
};

// Every check and the kernel choice of a 16-bit or f32 call; throws before anything runs.
// own_buffers: q, k, v and out are the library's workspace (checked by the caller: under
// CUDA graph capture a stream-ordered allocation is not yet device memory to
// cudaPointerGetAttributes).
FwdPlan plan_forward(const core::AttentionProblem& p, const DeviceInfo& dev, PhaseTimes* times,
                     bool own_buffers = false) {
  if (!own_buffers) check_pointers(p, dev);
  const int64_t hd = std::max(p.d, p.dv);
  if (hd > kMaxHeadDim)
    throw_error(Status::unsupported, "q: head dim " + std::to_string(hd) + " > " + std::to_string(kMaxHeadDim) +
                                         " is not supported by the CUDA kernels");
  check_kernel_limits(p);

  // Kernel choice. 16-bit: a tensor-core instance (by key, by tile, or the policy), else
  // an error. fp32: the exact FFMA kernel when asked for (exact_fp32 or its key), else
  // a TF32 instance when the head dims and strides allow (multiples of 4 elements,
  // 16-byte rows) and one fits, else the FFMA kernel (exact; never a wrong answer).
  const bool f32 = p.dtype == DType::f32;
  const bool forced = p.impl != nullptr && p.impl[0] != '\0';
  const bool simt_forced = f32 && forced && std::strcmp(p.impl, kSimtKey) == 0;
  const int64_t chunk = 16 / int64_t(dtype_size(p.dtype));  // elements per 16-byte copy
  const bool dims_ok = p.d % chunk == 0 && p.dv % chunk == 0;
  std::string bad_tensor;
  const std::string bad_align = tensor_core_misalignment(p, &bad_tensor);
  int64_t sq = p.sq, sk = p.sk;
  longest_sequences(p, &sq, &sk);
  if (!f32) {
    if (!dims_ok)
      throw_error(Status::unsupported, "q: head dims D = " + std::to_string(p.d) + ", Dv = " + std::to_string(p.dv) +
                                           " must be multiples of 8 for a forced 16-bit CUDA kernel (params.impl)");
    if (!bad_align.empty()) throw_error(Status::invalid_argument, bad_tensor + ": " + bad_align);
  }
  FwdPlan plan;  // choice.inst null: the FFMA kernel (f32 only: 16-bit choices throw instead)
  if (forced && !simt_forced)
    plan.choice = forced_choice(p, sq, sk, dev, hd, dims_ok, bad_tensor, bad_align);
  else if (!simt_forced && !(f32 && (p.exact_fp32 || !dims_ok || !bad_align.empty())))
    plan.choice = policy_choice(p, sq, sk, dev);

  plan.f = fwd_params(p, sq, sk, dev);
  plan.f.pack_shift = plan.choice.pack_shift;
  plan.f.o_tma = o_tma_mappable(p);
  plan.f.kv_splits = plan.choice.kv_splits;
  name_kernel(times, plan.choice.inst == nullptr ? kSimtKey : plan.choice.inst->key, plan.f);
  plan.empty = p.batch == 0 || p.heads == 0 || sq == 0;
  return plan;
}

void run_forward(const core::AttentionProblem& p, const DeviceInfo& dev, FwdPlan& plan) {
  if (plan.empty) return;
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if (plan.choice.inst != nullptr) return launch(p, dev, *plan.choice.inst, plan.f, stream);
  const cudaError_t e = fwd_sm80_f32_hd256_simt(plan.f, stream);
  if (e != cudaSuccess) cuda_fail(Status::device_error, std::string("CUDA kernel ") + kSimtKey + " failed to launch", e);
}

// 16-bit head dims that are not a multiple of 8 (head_pad.hpp): q, k, v copied with their
// head dims padded (policy.hpp: padded_head_dims), the padded problem planned and run as
// any other, O's first Dv columns copied back. One workspace from the pool holds the padded
// q, k, v and O; it is allocated before the plan and freed (stream-ordered) on every path.
void attention_head_padded(const core::AttentionProblem& p, const DeviceInfo& dev, PhaseTimes* times) {
  check_pointers(p, dev);
  auto [dp, dvp] = padded_head_dims(p);
  {  // widened to the row's whole 128-byte lines where it has them (policy.hpp: copy_width)
    core::AttentionProblem probe = p;
    probe.d = dp;
    probe.dv = dvp;
    int64_t sq = p.sq, sk = p.sk;
    longest_sequences(p, &sq, &sk);
    const InstanceInfo* inst = choose_kernel(probe, sq, sk, dev, instances()).kernel.inst;
    if (inst != nullptr) {
      dp = copy_width(*inst, dp);
      dvp = copy_width(*inst, dvp);
    }
  }
  const int64_t nb = p.cu_q != nullptr ? 1 : p.batch;  // varlen: the packed rows, one batch entry
  const PadView qv{p.q.data, p.q.sb, p.q.ss, p.q.sh, nb, p.sq, p.heads, p.d, dp};
  const PadView kv{p.k.data, p.k.sb, p.k.ss, p.k.sh, nb, p.sk, p.kv_heads, p.d, dp};
  const PadView vv{p.v.data, p.v.sb, p.v.ss, p.v.sh, nb, p.sk, p.kv_heads, p.dv, dvp};
  const PadView ov{p.o, p.o_sb, p.o_ss, p.o_sh, nb, p.sq, p.heads, p.dv, dvp};
  // Each view's padded buffer, 16-byte aligned, one after the other.
  const size_t es = dtype_size(p.dtype);
  const auto bytes = [&](const PadView& v) { return (size_t(v.padded_elems()) * es + 15) / 16 * 16; };
  const size_t total = bytes(qv) + bytes(kv) + bytes(vv) + bytes(ov);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  char* ws = nullptr;
  if (total > 0) {
    const cudaError_t ea = cudaMallocFromPoolAsync(reinterpret_cast<void**>(&ws), total, workspace_pool(dev.id), stream);
    if (ea != cudaSuccess) cuda_fail(Status::device_error, "q: allocating the head-dim padding workspace failed", ea);
  }
  char* qp = ws;
  char* kp = qp + bytes(qv);
  char* vp = kp + bytes(kv);
  char* op = vp + bytes(vv);
  const auto padded = [](const PadView& v, char* buf) {
    return core::Operand4{buf, v.padded_s0(), v.padded_s1(), v.cols_p};
  };
  core::AttentionProblem pp = p;
  pp.d = dp;
  pp.dv = dvp;
  pp.q = padded(qv, qp);
  pp.k = padded(kv, kp);
  pp.v = padded(vv, vp);
  pp.o = op;
  pp.o_sb = ov.padded_s0();
  pp.o_ss = ov.padded_s1();
  pp.o_sh = ov.cols_p;
  cudaError_t e = cudaSuccess;
  const char* what = "";
  try {
    FwdPlan plan = plan_forward(pp, dev, times, /*own_buffers=*/true);
    if (times != nullptr) times->kernel += "+hpad";
    if (!plan.empty) {
      what = "the head-dim padding copy";
      e = launch_pad_head(qv, qp, stream);
      if (e == cudaSuccess) e = launch_pad_head(kv, kp, stream);
      if (e == cudaSuccess) e = launch_pad_head(vv, vp, stream);
      if (e == cudaSuccess) run_forward(pp, dev, plan);
      if (e == cudaSuccess) e = launch_unpad_head(op, ov, p.o, stream);
    }
  } catch (...) {
    if (ws != nullptr) cudaFreeAsync(ws, stream);
    throw;
  }
  const cudaError_t ef = ws != nullptr ? cudaFreeAsync(ws, stream) : cudaSuccess;
  if (e != cudaSuccess) cuda_fail(Status::device_error, std::string("CUDA kernel ") + what + " failed to launch", e);
  if (ef != cudaSuccess) cuda_fail(Status::device_error, "q: freeing the head-dim padding workspace failed", ef);
}

// The sm90 kernels' heads-in-columns maps (FwdParams::q_hcol) of a 16-bit problem: per
// tensor 0 where its rows are 16-byte aligned (the usual maps; TMA zero-fills the columns
// past D), its head stride sh where only that stride is not (the base, row and batch strides
// are, as in [B, S, H, D] with H D a multiple of 8). A head's columns then start r = h sh
// mod 8 into its tile, and Q and K must agree on r: one query head per KV head and head
// strides equal mod 8. False where that does not hold, or a tensor has neither form, or the
// columns do not fit 32-bit coordinates.
struct ColumnHeads {
  int hcol[3] = {0, 0, 0};  // q, k, v
  int64_t d = 0, dv = 0;    // the head dims a kernel must hold: D + max r, Dv + max r_v
};
bool column_heads(const core::AttentionProblem& p, ColumnHeads* c) {
  const int64_t es = int64_t(dtype_size(p.dtype)), nb = p.cu_q != nullptr ? 1 : p.batch;
  const auto one = [&](const core::Operand4& t, int64_t rows, int64_t heads, int64_t d, int* out) {
    if (misalignment(t.data, 16, es, {{t.sb, nb}, {t.ss, rows}, {t.sh, heads}}).empty()) {
      *out = 0;
      return true;
    }
    if (!misalignment(t.data, 16, es, {{t.sb, nb}, {t.ss, rows}}).empty() || t.sh < 1 ||
        (heads - 1) * t.sh + d > INT_MAX / 2)
      return false;
    *out = int(t.sh);
    return true;
  };
  if (!one(p.q, p.sq, p.heads, p.d, &c->hcol[0]) || !one(p.k, p.sk, p.kv_heads, p.d, &c->hcol[1]) ||
      !one(p.v, p.sk, p.kv_heads, p.dv, &c->hcol[2]) || !misalignment(p.o, 2, es, {}).empty())
    return false;
  if ((c->hcol[0] != 0 || c->hcol[1] != 0) && (p.group() != 1 || c->hcol[0] % 8 != c->hcol[1] % 8)) return false;
  const auto most = [](int hcol, int64_t heads) {  // the largest r over the heads (period 8)
    int64_t r = 0;
    for (int64_t h = 0; h < std::min<int64_t>(heads, 8); ++h) r = std::max<int64_t>(r, h * hcol % 8);
    return r;
  };
  c->d = p.d + most(c->hcol[0], p.heads);
  c->dv = p.dv + most(c->hcol[2], p.kv_heads);
  return true;
}

// 16-bit head dims off the multiples of 8 in place on the sm90 kernels (no copies), where
// column_heads maps every tensor and the policy (heads_in_place) prefers the choice for D + r
// and Dv + r_v (rounded up to multiples of 8), an sm90 row, to the copies: the row's kernel
// reads the tensors at their real D and Dv (kernels/params.hpp: q_hcol). Run unpacked and unsplit (packed rows would need Q's heads
// as a box coordinate, the split partials' rows a Dv that is a multiple of 4). A forced key
// (no "+kv<N>") runs here when it is such a row that holds those dims. False, with nothing
// done, where it does not apply: the caller then copies (attention_head_padded) or refuses
// the forced key. Measurement switches: FLASHCORE_HEAD_COPIES=1 always copies,
// FLASHCORE_HEAD_IN_PLACE=1 runs in place wherever the tensors allow.
bool attention_head_columns(const core::AttentionProblem& p, const DeviceInfo& dev, PhaseTimes* times) {
  ColumnHeads ch;
  if (!dev.hopper() || core::env_flag("FLASHCORE_HEAD_COPIES") || !column_heads(p, &ch)) return false;
  int64_t sq = p.sq, sk = p.sk;
  longest_sequences(p, &sq, &sk);
  core::AttentionProblem pp = p;  // (the dims the kernel must hold, for the choice)
  pp.d = (ch.d + 7) / 8 * 8;
  pp.dv = (ch.dv + 7) / 8 * 8;
  const InstanceInfo* inst = nullptr;
  if (p.impl != nullptr && p.impl[0] != '\0') {
    inst = find_key(p.impl);
    if (inst == nullptr || inst->arch != 90 || !sm90_refusal(pp, *inst, dev).empty()) return false;
  } else {
    if (std::max(pp.d, pp.dv) > kMaxHeadDim) return false;
    const KernelChoice in_place = choose_in_place(pp, sq, sk, dev, instances());
    if (in_place.inst == nullptr) return false;
    core::AttentionProblem padded = p;
    std::tie(padded.d, padded.dv) = padded_head_dims(p);
    if (!core::env_flag("FLASHCORE_HEAD_IN_PLACE") &&
        !heads_in_place(in_place, choose_kernel(padded, sq, sk, dev, instances()).kernel, sk,
                        p.causal || p.windowed()))
      return false;
    inst = in_place.inst;
  }
  check_pointers(p, dev);
  check_kernel_limits(p);
  FwdParams f = fwd_params(p, sq, sk, dev);
  f.q_hcol = ch.hcol[0];
  f.k_hcol = ch.hcol[1];
  f.v_hcol = ch.hcol[2];
  f.pack_shift = 0;
  f.kv_splits = 1;
  f.o_tma = false;
  name_kernel(times, inst->key, f);
  if (times != nullptr) times->kernel += "+hcols";
  if (p.batch == 0 || p.heads == 0 || sq == 0) return true;
  launch(p, dev, *inst, f, static_cast<cudaStream_t>(p.stream));
  return true;
}

}  // namespace

void attention(const core::AttentionProblem& p, PhaseTimes* times) {
  const DeviceInfo dev = device_info(true);
  if (p.dtype == DType::e4m3) return attention_fp8(p, dev, times);
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    throw_error(Status::unsupported, std::string("q: dtype ") + to_string(p.dtype) +
                                         " is not supported by the CUDA kernels (f32, f16, bf16; e4m3 on Hopper)");
  // 16-bit head dims off the multiples of 8: in place on the sm90 kernels where the tensors'
  // rows allow, else through padded copies (their rows are not 16-byte aligned); a forced
  // key that does not run in place is refused by the checks below.
  const bool forced = p.impl != nullptr && p.impl[0] != '\0';
  if (p.dtype != DType::f32 && (p.d % 8 != 0 || p.dv % 8 != 0) && std::max(p.d, p.dv) <= kMaxHeadDim) {
    if (attention_head_columns(p, dev, times)) return;
    if (!forced) return attention_head_padded(p, dev, times);
  }
  FwdPlan plan = plan_forward(p, dev, times);
  run_forward(p, dev, plan);
}

std::vector<KernelInfo> kernels() {
  std::optional<DeviceInfo> dev;  // none: no usable device
  try {
    dev = device_info(true);
  } catch (const Error&) {
  }
  std::vector<KernelInfo> out;
  for (const InstanceInfo& i : instances())
    out.push_back({i.key, i.arch == 90 ? "sm90" : "sm80", dev.has_value() && i.runs_on(*dev)});
  out.push_back({kSimtKey, "sm80", dev.has_value()});
  append_backward_kernels(out, dev.has_value() ? &*dev : nullptr);
  return out;
}

}  // namespace flashcore::cuda
