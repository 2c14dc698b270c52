// CUDA attention_with_kvcache (backend.hpp): the checks only the device side can make
// (pointer kinds, dtypes, head dims, 16-byte rows), the kvc instance (policy.hpp:
// pick_kvcache) and its KV splits, then on the caller's stream the append of k_new / v_new
// (kv_append.cu) and the attention (launch.hpp: the kvc kernel, kv_combine.cu after splits).
// cache_seqlens and block_table stay on the device: nothing here synchronizes, so a call can
// be captured in a CUDA graph; the kernels clamp the lengths to the cache and read a page id
// outside it as zero rows (they never address memory outside the caches).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "core/errors.hpp"
#include "cuda/backend.hpp"
#include "cuda/device.hpp"
#include "cuda/kv_append.hpp"
#include "cuda/launch.hpp"
#include "cuda/policy.hpp"
#include "cuda/problem_checks.hpp"
#include "cuda/registry.hpp"

namespace flashcore::cuda {
namespace {

// 16-byte rows of the caches, q and the new keys; 4-byte pairs of out.
void check_alignment(const core::KvCacheProblem& pr) {
  const core::AttentionProblem& p = pr.attn;
  const bool paged = p.block_table != nullptr;
  const int64_t es = int64_t(dtype_size(p.dtype)), kes = int64_t(dtype_size(p.kv_dtype));
  const int64_t blocks = paged ? pr.num_pages : p.batch, rows = paged ? p.page_size : pr.cache_rows;
  const std::pair<const char*, std::string> checks[] = {
      {"q", misalignment(p.q.data, 16, es, {{p.q.sb, p.batch}, {p.q.ss, p.sq}, {p.q.sh, p.heads}})},
      {"k_cache", misalignment(p.k.data, 16, kes, {{p.k.sb, blocks}, {p.k.ss, rows}, {p.k.sh, p.kv_heads}})},
      {"v_cache", misalignment(p.v.data, 16, kes, {{p.v.sb, blocks}, {p.v.ss, rows}, {p.v.sh, p.kv_heads}})},
      {"k_new", misalignment(pr.k_new.data, 16, kes, {{pr.k_new.sb, p.batch}, {pr.k_new.ss, pr.s_new}, {pr.k_new.sh, p.kv_heads}})},
      {"v_new", misalignment(pr.v_new.data, 16, kes, {{pr.v_new.sb, p.batch}, {pr.v_new.ss, pr.s_new}, {pr.v_new.sh, p.kv_heads}})},
      {"out", misalignment(p.o, 4, es, {{p.o_sb, p.batch}, {p.o_ss, p.sq}, {p.o_sh, p.heads}})},
  };
  for (const auto& [name, why] : checks)
    if (!why.empty()) throw_error(Status::invalid_argument, std::string(name) + ": " + why);
}

KvAppendParams append_params(const core::KvCacheProblem& pr) {
  const core::AttentionProblem& p = pr.attn;
  KvAppendParams a;
  a.k_cache = const_cast<void*>(p.k.data);  // written: the API checked the caches as outputs
  a.v_cache = const_cast<void*>(p.v.data);
  a.k_sb = p.k.sb, a.k_ss = p.k.ss, a.k_sh = p.k.sh;
  a.v_sb = p.v.sb, a.v_ss = p.v.ss, a.v_sh = p.v.sh;
  a.k_new = pr.k_new.data, a.v_new = pr.v_new.data;
  a.kn_sb = pr.k_new.sb, a.kn_ss = pr.k_new.ss, a.kn_sh = pr.k_new.sh;
  a.vn_sb = pr.v_new.sb, a.vn_ss = pr.v_new.ss, a.vn_sh = pr.v_new.sh;
  a.seqlens = p.seqlens_k;
  a.block_table = p.block_table;
  a.bt_sb = p.block_table_sb;
  a.page_size = int(p.page_size), a.num_pages = int(pr.num_pages), a.cache_rows = int(pr.cache_rows);
  a.batch = int(p.batch), a.s_new = int(pr.s_new), a.kv_heads = int(p.kv_heads), a.d = int(p.d), a.dv = int(p.dv);
  a.elem_bytes = int(dtype_size(p.kv_dtype));
  return a;
}

}  // namespace

void copy_rows_to_host(void* dst, const void* src, int64_t rows, int64_t row_bytes, int64_t pitch, void* stream,
                       const char* name) {
  if (rows <= 0 || row_bytes <= 0) return;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaMemcpy2DAsync(dst, size_t(row_bytes), src, size_t(pitch), size_t(row_bytes), size_t(rows),
                                    cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) cuda_fail(Status::device_error, std::string(name) + ": copying to the host failed", e);
}

void attention_with_kvcache(const core::KvCacheProblem& pr, PhaseTimes* times) {
  const core::AttentionProblem& p = pr.attn;
  const DeviceInfo dev = device_info(true);
  if (p.dtype != DType::f16 && p.dtype != DType::bf16)
    throw_error(Status::unsupported,
                std::string("q: attention_with_kvcache on CUDA takes f16 or bf16 tensors, got ") + to_string(p.dtype));
  const bool fp8 = p.kv_dtype == DType::e4m3;
  if (p.kv_dtype != p.dtype && !fp8)
    throw_error(Status::unsupported, std::string("k_cache: a ") + to_string(p.kv_dtype) + " cache under " +
                                         to_string(p.dtype) + " q; CUDA takes q's dtype or e4m3");
  if (p.impl != nullptr && p.impl[0] != '\0' && std::strcmp(p.impl, "auto") != 0)
    throw_error(Status::unsupported, std::string("params.impl: '") + p.impl +
                                         "': attention_with_kvcache on CUDA takes no forced kernel (leave impl unset)");
  if (p.tile_m != 0 || p.tile_n != 0)
    throw_error(Status::unsupported, "params.tile_m: attention_with_kvcache on CUDA has no tile choice (leave tile_m/tile_n 0)");
  refuse_score_variants(p, "CUDA attention_with_kvcache");
  const int64_t mult = fp8 ? 16 : 8;  // 16-byte chunks of the cache's rows
  if (p.d % mult != 0 || p.dv % mult != 0)
    throw_error(Status::unsupported, "q: head dims D = " + std::to_string(p.d) + ", Dv = " + std::to_string(p.dv) +
                                         " must be multiples of " + std::to_string(mult) +
                                         " for attention_with_kvcache on CUDA" + (fp8 ? " over an e4m3 cache" : ""));
  const bool paged = p.block_table != nullptr;
  if (pr.cache_rows + pr.s_new > INT_MAX || pr.num_pages > INT_MAX)
    throw_error(Status::unsupported, std::string(paged ? "block_table: max_pages * page_size" : "k_cache: S_max") +
                                         " (with S_new) passes 2^31 - 1 keys, more than the CUDA kernels index");
  const std::pair<const void*, const char*> ptrs[] = {
      {p.q.data, "q"},         {p.k.data, "k_cache"},     {p.v.data, "v_cache"}, {p.o, "out"},
      {p.lse, "params.lse"},   {p.seqlens_k, "cache_seqlens"}, {p.block_table, "block_table"},
      {pr.k_new.data, "k_new"}, {pr.v_new.data, "v_new"}, {p.k_descale_heads, "params.k_descale_heads"},
      {p.v_descale_heads, "params.v_descale_heads"}};
  for (const auto& [ptr, name] : ptrs) check_device_pointer(ptr, name, dev.id);
  const int64_t hd = std::max(p.d, p.dv);
  const int pack_shift = gqa_pack_shift(p, p.sq);
  const InstanceInfo* inst =
      pick_kvcache(p.dtype, hd, p.sq << pack_shift, dev, kvcache_instances(), fp8, paged ? p.page_size : 0);
  if (inst == nullptr)
    throw_error(Status::unsupported, "q: head dim " + std::to_string(hd) + " (" + to_string(p.dtype) +
                                         (fp8 ? " over an e4m3 cache: head dims up to 128" : "") +
                                         ") has no CUDA KV-cache instance in this build that fits this device "
                                         "(FLASHCORE_CUDA_HDIMS/DTYPES)");
  check_alignment(pr);
  check_kernel_limits(p);

  FwdParams f = fwd_params(p, p.sq, pr.cache_rows, dev);
  f.seqlens_k = p.seqlens_k;
  f.s_new = int(pr.s_new);
  f.cache_rows = int(pr.cache_rows);
  f.block_table = p.block_table;
  f.bt_sb = p.block_table_sb;
  f.page_size = int(p.page_size);
  f.num_pages = int(pr.num_pages);
  f.pack_shift = pack_shift;
  f.kv_splits = kvcache_split_count(p.sq << f.pack_shift, p.heads >> f.pack_shift, p.batch, pr.cache_rows, *inst, dev);
  name_kernel(times, inst->key, f);
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if (pr.s_new > 0 && p.batch > 0 && p.kv_heads > 0) {
    const cudaError_t e = launch_kv_append(append_params(pr), dev.sms, stream);
    if (e != cudaSuccess) cuda_fail(Status::device_error, "CUDA kernel kv_append failed to launch", e);
  }
  if (p.batch == 0 || p.heads == 0 || p.sq == 0) return;
  launch(p, dev, *inst, f, stream);
}

}  // namespace flashcore::cuda
