// Launch mechanics of the CUDA backend (launch.hpp).
#include "cuda/launch.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <string>

#include "core/env.hpp"
#include "cuda/registry.hpp"
#include "cuda/workspace.hpp"

namespace flashcore::cuda {

FwdParams fwd_params(const core::AttentionProblem& p, int64_t sq, int64_t sk, const DeviceInfo& dev) {
  const core::BandMask band = core::make_mask(p.causal, p.window_left, p.window_right, sq, sk);
  FwdParams f;
  f.q = p.q.data; f.k = p.k.data; f.v = p.v.data; f.o = p.o; f.lse = p.lse;
  f.q_sb = p.q.sb; f.q_ss = p.q.ss; f.q_sh = p.q.sh;
  f.k_sb = p.k.sb; f.k_ss = p.k.ss; f.k_sh = p.k.sh;
  f.v_sb = p.v.sb; f.v_ss = p.v.ss; f.v_sh = p.v.sh;
  f.o_sb = p.o_sb; f.o_ss = p.o_ss; f.o_sh = p.o_sh;
  f.lse_sb = p.lse_sb; f.lse_sh = p.lse_sh;
  f.batch = int(p.batch); f.sq = int(sq); f.sk = int(sk);
  f.heads = int(p.heads); f.group = int(p.group()); f.kv_heads = int(p.kv_heads);
  f.d = int(p.d); f.dv = int(p.dv);
  f.cu_q = p.cu_q; f.cu_k = p.cu_k;
  f.total_q = int(p.sq); f.total_k = int(p.sk);  // varlen: the packed tensors' rows
  f.sms = dev.sms;
  f.l2_bytes = dev.l2_bytes;
  f.window_left = band.left < 0 ? -1 : int(std::min<int64_t>(band.left, INT_MAX / 4));
  f.window_right = band.right < 0 ? -1 : int(std::min<int64_t>(band.right, INT_MAX / 4));
  f.scale_log2 = p.scale * 1.4426950408889634f;
  // fp8 dequantization (e4m3 q / k / v, or an e4m3 KV cache; for other inputs the API keeps
  // every factor 1 and the per-head arrays null): Q's and K's factors into the scores' scale,
  // V's into the output; the per-head arrays are read by the kernels.
  f.scale_log2 *= p.q_descale * p.k_descale;
  f.o_scale = p.v_descale;
  f.q_descale_heads = p.q_descale_heads;
  f.k_descale_heads = p.k_descale_heads;
  f.v_descale_heads = p.v_descale_heads;
  // The score variants (FwdParams: the log2-domain factors, read by the sm90 "_sv" and the sm80
  // family's variant kernels).
  f.variants = p.variants();
  if (p.softcap > 0.0f) {
    f.softcap_in = float(2.0 * 1.4426950408889634 * double(p.scale) / double(p.softcap));
    f.softcap_out = float(double(p.softcap) * 1.4426950408889634);
    if (p.exp2 == Exp2Mode::fast) f.tanh_in = float(double(p.scale) / double(p.softcap));
  }
  f.alibi = p.alibi;
  f.alibi_sb = p.alibi_sb;
  f.sinks = p.sinks;
  return f;
}

// Names the kernel that runs in times: its key, "+gqa<G>" for packed query heads, "+kv<N>"
// for KV splits, "+chord" for an fp8 kernel's chord form (Exp2Mode::fast without lse).
void name_kernel(PhaseTimes* times, const char* key, const FwdParams& f) {
  if (times == nullptr) return;
  times->kernel = key;
  if (f.pack_shift > 0) times->kernel += "+gqa" + std::to_string(1 << f.pack_shift);
  if (f.kv_splits > 1) times->kernel += "+kv" + std::to_string(f.kv_splits);
  if (f.exp_chord) times->kernel += "+chord";
  times->strategy = to_string(Strategy::online);
}

// The launches share one workspace (WorkspaceLayout); each launch stops the chain at its
// error, named.
void launch(const core::AttentionProblem& p, const DeviceInfo& dev, const InstanceInfo& inst, FwdParams& f,
            cudaStream_t stream) {
  const bool split = f.kv_splits > 1;
  const int64_t vt_blocks = p.cu_q != nullptr ? 1 : p.batch;  // varlen: one [Hkv][Dv][vt_sk] block
  // V^T (e4m3): the kernel's own warps where it can, its counters zeroed here, else the
  // pre-pass (policy.hpp: vt_path).
  const VtPath vt = vt_path(inst, p.cu_q != nullptr, core::env_flag("FLASHCORE_SM90_VT_PREPASS"));
  const bool fused = vt == VtPath::fused, prepass = vt == VtPath::prepass;
  WorkspaceLayout ws_layout;
  ws_layout.vt_bytes = prepass || fused ? size_t(vt_blocks * p.kv_heads * p.dv * f.vt_sk + 15) / 16 * 16 : 0;
  ws_layout.bad_bytes = prepass || fused ? size_t(f.fp8_bad_size() * 4 + 15) / 16 * 16 : 0;
  ws_layout.sync_bytes = fused ? size_t(2 + 2 * p.batch * p.kv_heads + 3) / 4 * 16 : 0;
  const size_t rows = split ? size_t(f.o_rows() * p.heads) : 0;
  ws_layout.o_bytes = size_t(f.kv_splits) * rows * size_t(p.dv) * 4;
  ws_layout.ml_bytes = split ? size_t(f.kv_splits) * rows * sizeof(float4) : 0;
  char* ws = nullptr;
  const char* ws_name = prepass || fused ? "e4m3 V^T" : "KV-split";
  if (ws_layout.total() > 0) {
    const cudaError_t ea =
        cudaMallocFromPoolAsync(reinterpret_cast<void**>(&ws), ws_layout.total(), workspace_pool(dev.id), stream);
    if (ea != cudaSuccess) cuda_fail(Status::device_error, std::string("q: allocating the ") + ws_name + " workspace failed", ea);
  }
  cudaError_t e = cudaSuccess;
  const char* what = inst.key;
  if (prepass || fused) {  // V^T's NaN record (parts/nonfinite_v.cuh), told apart from an earlier call's by the stamp
    static std::atomic<unsigned> stamps{0};
    f.vt_bad = reinterpret_cast<unsigned*>(ws + ws_layout.bad_offset());
    f.vt_stamp = stamps.fetch_add(1, std::memory_order_relaxed) % 0xFFFFFFFEu + 1;  // never 0
  }
  if (prepass) {
    f.vt = ws;
    e = transpose_v_fp8(f, ws, f.vt_sk, stream);
    what = "the e4m3 V^T pre-pass";
  } else if (fused) {  // no splits on these (persistent) kernels: the counters are the workspace's tail
    f.vt = ws;
    f.vt_sync = reinterpret_cast<unsigned*>(ws + ws_layout.sync_offset());
    f.vt_kv_heads = int(p.kv_heads);
    f.vt_head_units = int(f.vt_sk / 32) * int(p.dv / 128);
    f.vt_units = f.vt_head_units * f.vt_kv_heads * f.batch;
    e = cudaMemsetAsync(f.vt_sync, 0, ws_layout.sync_bytes, stream);
    what = "the e4m3 V^T counters' memset";
  }
  if (e == cudaSuccess) {
    if (split) {
      f.part_o = reinterpret_cast<float*>(ws + ws_layout.o_offset());
      f.part_ml = reinterpret_cast<float4*>(ws + ws_layout.ml_offset());  // o_bytes: a multiple of 16
    }
    e = launcher(inst)(f, stream);
    what = inst.key;
  }
  if (e == cudaSuccess && split) {
    e = kv_combine(f, p.out_dtype == DType::bf16, stream);
    what = "kv_combine";
  }
  const cudaError_t ef = ws != nullptr ? cudaFreeAsync(ws, stream) : cudaSuccess;
  if (e != cudaSuccess) cuda_fail(Status::device_error, std::string("CUDA kernel ") + what + " failed to launch", e);
  if (ef != cudaSuccess) cuda_fail(Status::device_error, std::string("q: freeing the ") + ws_name + " workspace failed", ef);
}

}  // namespace flashcore::cuda
