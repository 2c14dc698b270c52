// Host side of the TMA loads: builds a CUtensorMap with cuTensorMapEncodeTiled, reached
// through the runtime's driver entry point (cudaGetDriverEntryPointByVersion), so that
// nothing links against libcuda. Used by the sm90 instances' launchers.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace flashcore::cuda {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled, looked up once per process; nullptr if the driver has none.
inline EncodeTiledFn encode_tiled_fn() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// 4-d tiled map of a [d3][d2][d1][d0] tensor of `elem_bytes`-byte elements (d0
// contiguous; strides in elements, any order), box {row_bytes of d0, box_rows, box2, 1} (one
// 128-byte row chunk per row: 64 16-bit or 128 8-bit elements) with the 128-byte swizzle
// that wgmma's K-major and MN-major SW128 layouts read; or (row_bytes 64) 64-byte rows with
// the 64-byte swizzle of the SW64 layouts (fp8's V^T). Out-of-bounds elements (rows past
// d1, columns past d0) are written as zeros. A stride of a dimension of extent 1 is never
// used: it is replaced by a valid one (TMA wants multiples of 16 bytes).
//
// Encoding costs host time on every launch (short shapes are launch-bound), so the maps
// of the last kCached distinct argument lists are kept per thread: a map is a pure
// function of its arguments (it holds the address, not the data).
inline cudaError_t make_tma_4d(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* base,
                               int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s1, int64_t s2, int64_t s3,
                               int box_rows, int box2 = 1, int row_bytes = 128) {
  struct Key {
    const void* base;
    int64_t dims[7];
    int type, elem_bytes, box_rows, box2, row_bytes;
  };
  struct Entry {
    Key key;
    CUtensorMap map;
  };
  constexpr int kCached = 16;
  thread_local Entry cache[kCached];
  thread_local int cached = 0, next = 0;
  Key key{};  // zero-initialized, padding included: keys compare with memcmp
  key.base = base;
  const int64_t dims7[7] = {d0, d1, d2, d3, s1, s2, s3};
  std::memcpy(key.dims, dims7, sizeof(dims7));
  key.type = int(type);
  key.elem_bytes = elem_bytes;
  key.box_rows = box_rows;
  key.box2 = box2;
  key.row_bytes = row_bytes;
  for (int i = 0; i < cached; ++i)
    if (std::memcmp(&cache[i].key, &key, sizeof(Key)) == 0) {
      *map = cache[i].map;
      return cudaSuccess;
    }
  const EncodeTiledFn encode = encode_tiled_fn();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint64_t dims[4] = {cuuint64_t(d0), cuuint64_t(d1), cuuint64_t(d2), cuuint64_t(d3)};
  int64_t st[3] = {s1, s2, s3};
  const int64_t ext[3] = {d1, d2, d3};
  // A dimension of extent 1 never moves an address: its stride, which TMA still wants a
  // multiple of 16 bytes, is the packed one rounded up to that.
  const int64_t align = 16 / elem_bytes;
  for (int i = 0; i < 3; ++i)
    if (ext[i] <= 1) st[i] = ((i == 0 ? d0 : st[i - 1] * ext[i - 1]) + align - 1) / align * align;
  const cuuint64_t strides[3] = {cuuint64_t(st[0] * elem_bytes), cuuint64_t(st[1] * elem_bytes),
                                 cuuint64_t(st[2] * elem_bytes)};
  if (row_bytes != 128 && row_bytes != 64) return cudaErrorInvalidValue;
  const cuuint32_t box[4] = {cuuint32_t(row_bytes / elem_bytes), cuuint32_t(box_rows), cuuint32_t(box2), 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, type, 4, const_cast<void*>(base), dims, strides, box, estr,
                            CU_TENSOR_MAP_INTERLEAVE_NONE,
                            row_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return cudaErrorInvalidValue;
  cache[next] = Entry{key, *map};
  next = (next + 1) % kCached;
  cached = cached < kCached ? cached + 1 : kCached;
  return cudaSuccess;
}

// 16-bit (f16 / bf16) and 8-bit (fp8, as raw bytes) maps.
inline cudaError_t make_tma_16bit_4d(CUtensorMap* map, bool bf16, const void* base, int64_t d0, int64_t d1,
                                     int64_t d2, int64_t d3, int64_t s1, int64_t s2, int64_t s3, int box_rows,
                                     int box2 = 1) {
  return make_tma_4d(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, base, d0, d1,
                     d2, d3, s1, s2, s3, box_rows, box2);
}
inline cudaError_t make_tma_8bit_4d(CUtensorMap* map, const void* base, int64_t d0, int64_t d1, int64_t d2,
                                    int64_t d3, int64_t s1, int64_t s2, int64_t s3, int box_rows,
                                    int row_bytes = 128, int box2 = 1) {
  return make_tma_4d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, base, d0, d1, d2, d3, s1, s2, s3, box_rows, box2,
                     row_bytes);
}

}  // namespace flashcore::cuda
