// How many key tiles of one work item the band or Sk can cut (params.hpp: CutTiles), and the
// shared memory the sm80 forward keeps beside its Q, K and V tiles for V's NaN / Inf
// (parts/nonfinite_v.cuh), and the shared memory of the KV cache's key-split rows over an fp8
// cache (kvc_sm80.cuh) and with TMA loads (kvc_sm90.cuh). Plain C++: the policy (policy.hpp) reads each instance's shared
// memory from here too.
#pragma once

namespace flashcore::cuda {

// Cut tiles per item: each edge of the band spans the block's rows (block_m - 1 keys, so at
// most (block_m - 1) / block_n + 2 tiles), and Sk's end falls in the last.
constexpr int max_cut_tiles(int block_m, int block_n) { return 2 * ((block_m - 1) / block_n + 2); }

// The sm80 kernel's extra shared memory: the record of V's cleaned keys (ceil(block_n / 32)
// words per cut tile), 16-byte aligned.
constexpr int sm80_cut_words(int block_m, int block_n) { return max_cut_tiles(block_m, block_n) * ((block_n + 31) / 32); }
constexpr int sm80_extra_smem(int block_m, int block_n) { return (sm80_cut_words(block_m, block_n) * 4 + 15) / 16 * 16; }

// The key-split kvc rows over an e4m3 cache (KvcSplitTraits with a widened ring): the 16-bit
// Q tile, `stages` e4m3 K and V tiles, and one 16-bit V tile; rows padded to 128 bytes.
constexpr int kvc_fp8_smem(int head_dim, int block_m, int block_n, int stages) {
  const int row16 = (head_dim * 2 + 127) / 128 * 128, row8 = (head_dim + 127) / 128 * 128;
  return block_m * row16 + 2 * stages * block_n * row8 + block_n * row16;
}

// The key-split rows with TMA loads (kvc_sm90.cuh): the 16-bit Q tile, `stages` K and V
// tiles, one 8-byte mbarrier per stage; rows padded to 128 bytes.
constexpr int kvc_tma_smem(int head_dim, int block_m, int block_n, int stages) {
  const int row = (head_dim * 2 + 127) / 128 * 128;
  return (block_m + 2 * stages * block_n) * row + 8 * stages;
}

}  // namespace flashcore::cuda
