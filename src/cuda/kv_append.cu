// attention_with_kvcache's append (kv_append.hpp): one thread per 16 bytes of a new K or V
// row, grid-stride over (sequence, new key, KV head, chunk).
#include "cuda/kv_append.hpp"

#include <algorithm>

namespace flashcore::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) kv_append_kernel(const KvAppendParams p) {
  const int per_chunk = 16 / p.elem_bytes;                     // elements per 16-byte chunk
  const int kc = p.d / per_chunk, per = kc + p.dv / per_chunk;  // chunks of a K row, of a K and a V row
  const int64_t total = int64_t(p.batch) * p.s_new * p.kv_heads * per;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < total; i += int64_t(gridDim.x) * kThreads) {
    const int c = int(i % per);
    int64_t r = i / per;
    const int hk = int(r % p.kv_heads);
    r /= p.kv_heads;
    const int s = int(r % p.s_new), b = int(r / p.s_new);
    const int64_t slot = int64_t(p.seqlens[b]) + s;
    if (slot < 0 || slot >= p.cache_rows) continue;
    int64_t base = b, row = slot;  // (batch entry or page, row) of the slot
    if (p.block_table != nullptr) {
      const int64_t j = slot / p.page_size;
      base = p.block_table[b * p.bt_sb + j];
      if (base < 0 || base >= p.num_pages) continue;
      row = slot - j * p.page_size;
    }
    const bool k = c < kc;
    const int64_t col = int64_t(k ? c : c - kc) * per_chunk;
    const int64_t src_el = (k ? b * p.kn_sb + s * p.kn_ss + hk * p.kn_sh : b * p.vn_sb + s * p.vn_ss + hk * p.vn_sh) + col;
    const int64_t dst_el =
        (k ? base * p.k_sb + row * p.k_ss + hk * p.k_sh : base * p.v_sb + row * p.v_ss + hk * p.v_sh) + col;
    const unsigned char* src = static_cast<const unsigned char*>(k ? p.k_new : p.v_new) + src_el * p.elem_bytes;
    unsigned char* dst = static_cast<unsigned char*>(k ? p.k_cache : p.v_cache) + dst_el * p.elem_bytes;
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  }
}

}  // namespace

cudaError_t launch_kv_append(const KvAppendParams& p, int sms, cudaStream_t stream) {
  const int per_chunk = 16 / p.elem_bytes;
  const int64_t total = int64_t(p.batch) * p.s_new * p.kv_heads * (p.d / per_chunk + p.dv / per_chunk);
  if (total == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(std::max(sms, 1)) * 8);
  kv_append_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashcore::cuda
