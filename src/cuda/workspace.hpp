// Device workspace of the CUDA backend's calls (the fp8 V^T and its counters, the KV
// splits' partial rows): stream-ordered memory from a pool of the library's own per device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace flashcore::cuda {

// The pool keeps what it has allocated (release threshold: unlimited), so calls after the
// first neither cudaMalloc nor synchronize, and a buffer is reused only in stream order.
// Throws device_error when the pool cannot be made.
cudaMemPool_t workspace_pool(int device);

// One call's workspace: [V^T][V^T's NaN record][V^T counters][splits' fp32 O rows][their
// (m, mlo, l)]; V^T, the record and the counters take multiples of 16 bytes, the O rows too
// (Dv a multiple of 8 floats: the float4 alignment of the (m, mlo, l) rows).
struct WorkspaceLayout {
  size_t vt_bytes = 0, bad_bytes = 0, sync_bytes = 0, o_bytes = 0, ml_bytes = 0;
  size_t total() const { return vt_bytes + bad_bytes + sync_bytes + o_bytes + ml_bytes; }
  size_t bad_offset() const { return vt_bytes; }
  size_t sync_offset() const { return vt_bytes + bad_bytes; }
  size_t o_offset() const { return sync_offset() + sync_bytes; }
  size_t ml_offset() const { return o_offset() + o_bytes; }
};

}  // namespace flashcore::cuda
