// Pipelines of the sm90 kernels: a ring of kStages shared-memory buffers passed between one
// producer (TMA loads, or warps that write the buffers) and the consumer warpgroups, each
// stage with a "full" mbarrier (the producer's arrival with the bytes its loads bring, or
// the writing warps' arrivals) and an "empty" one (one arrival per consumer warp once it is
// done with the stage). A pipeline is the barriers' addresses; where a party stands in it is
// a PipelineState. Shared by the forward's parts (the Q buffer, the K and V rings, fp8's raw
// V ring) and meant for the backward's (Q / dO streaming, dK / dV accumulation).
// mbarrier semantics: PTX ISA 9.7.13.15 (a phase completes when its arrivals and expected
// transaction bytes are in; waiters test the parity of the phase they wait for).
#pragma once

#include <cstdint>

#include "cuda/common/ptx_sm90.cuh"

namespace flashcore::cuda::sm90 {

// The n-th buffer a party handles (n counts from 0 over the kernel's life, across work
// items): stage n % kStages, in its round n / kStages. Kept as the count rather than an index
// and a phase stepped together: the key loop, unrolled by two, addresses buffers n and
// n + 1, and with two stages both are bits of the count.
template <int kStages>
struct PipelineState {
  int count;
  __device__ __forceinline__ int stage() const { return count % kStages; }
  // Parity of the phase in which buffer `count` fills (what its consumer waits for).
  __device__ __forceinline__ uint32_t full_parity() const { return (count / kStages) & 1; }
  // Parity of the stage's previous round's release (what the producer waits for before
  // refilling it; none in the first round).
  __device__ __forceinline__ uint32_t empty_parity() const { return ((count / kStages) - 1) & 1; }
  __device__ __forceinline__ bool first_round() const { return count < kStages; }
};

// The barriers of a ring: stage s's full barrier at full0 + 8 s, its empty one at
// empty0 + 8 s (shared-memory addresses; the layout is the kernel's, SmemLayout).
template <int kStages>
struct Pipeline {
  uint32_t full0, empty0;

  __device__ __forceinline__ uint32_t full(int s) const { return full0 + 8u * s; }
  __device__ __forceinline__ uint32_t empty(int s) const { return empty0 + 8u * s; }

  // One thread, before the CTA's first barrier sync: arrivals per phase of each barrier.
  __device__ __forceinline__ void init(uint32_t full_arrivals, uint32_t empty_arrivals) const {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(full(s), full_arrivals);
      ptx::mbar_init(empty(s), empty_arrivals);
    }
  }
  // Producer: waits until buffer st's stage was released by its consumers (the previous
  // round's), then (acquire_tx) arrives with the bytes its TMA loads will bring.
  __device__ __forceinline__ void producer_acquire(PipelineState<kStages> st) const {
    if (!st.first_round()) ptx::mbar_wait(empty(st.stage()), st.empty_parity());
  }
  __device__ __forceinline__ void producer_expect(PipelineState<kStages> st, uint32_t bytes) const {
    ptx::mbar_arrive_expect_tx(full(st.stage()), bytes);
  }
  // Writing warps (not TMA): one arrival per warp once its writes are visible.
  __device__ __forceinline__ void producer_commit(PipelineState<kStages> st) const { ptx::mbar_arrive(full(st.stage())); }
  // Consumers: wait for buffer st; release it (one arrival per warp: lane 0).
  __device__ __forceinline__ void consumer_wait(PipelineState<kStages> st) const {
    ptx::mbar_wait(full(st.stage()), st.full_parity());
  }
  __device__ __forceinline__ void consumer_release(PipelineState<kStages> st, int lane) const {
    if (lane == 0) ptx::mbar_arrive(empty(st.stage()));
  }
};

// Named barrier ids (bar.sync / bar.arrive; 0 is __syncthreads): the ping-pong turns of the
// consumer warpgroups take 1 .. 4, each consumer's epilogue its own above them (8 .. 11).
constexpr uint32_t kBarTurn0 = 1;
constexpr uint32_t kBarEpilogue0 = 8;

}  // namespace flashcore::cuda::sm90
