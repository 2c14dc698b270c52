// The in-place append of attention_with_kvcache on CUDA tensors: k_new / v_new rows written
// into the cache at each sequence's slots cache_seqlens[b] .. + S_new - 1 (through the block
// table when paged), before the attention kernel on the same stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashcore::cuda {

// Element strides; the caches' sb is the batch stride (contiguous) or the page stride
// (paged: k_cache / v_cache point at page 0). Elements of elem_bytes (2, or 1: an e4m3
// cache), rows of whole 16-byte chunks, every row 16-byte aligned (checked by the backend). A slot past cache_rows or on a page id
// outside [0, num_pages) is not written (the lengths and the table are not read on the host).
struct KvAppendParams {
  void *k_cache = nullptr, *v_cache = nullptr;
  int64_t k_sb = 0, k_ss = 0, k_sh = 0, v_sb = 0, v_ss = 0, v_sh = 0;
  const void *k_new = nullptr, *v_new = nullptr;
  int64_t kn_sb = 0, kn_ss = 0, kn_sh = 0, vn_sb = 0, vn_ss = 0, vn_sh = 0;
  const int32_t* seqlens = nullptr;
  const int32_t* block_table = nullptr;  // null: contiguous
  int64_t bt_sb = 0;
  int page_size = 0, num_pages = 0, cache_rows = 0;
  int batch = 0, s_new = 0, kv_heads = 0, d = 0, dv = 0;
  int elem_bytes = 2;
};

cudaError_t launch_kv_append(const KvAppendParams& p, int sms, cudaStream_t stream);

}  // namespace flashcore::cuda
