// V's NaN / Inf at keys a mask hides from some rows (parts/nonfinite_v.cuh), in the sm90
// kernels: the record of an item's cleaned keys in shared memory (BadKeys), and the 16-bit
// kernels' scan of the V tiles the band or Sk cuts (VScanner, FwdSm90Config::kScanV).
//
// VScanner: the producer warpgroup's three spare warps (24 registers each). The TMA thread
// brings a cut tile's V onto the stage's vraw barrier instead of its full one (load.cuh;
// whole tiles never touch vraw, so a stage's vraw phases are its cut tiles alone); these
// warps walk the same items and tiles (jobs the TMA thread posts), wait for it, and read it
// a 32-key group per warp, lane L the row of key 32 g + L (every 16-byte
// chunk of the row, chunk (i + L) % 8 in turn: four wavefronts per load, no more). A row
// with a NaN or Inf is cleaned in place (its non-finite elements set to 0), the group's
// ballot is the record's word for those keys, and a non-zero word tags the item. Then the writes are fenced for the async proxy
// (wgmma reads the stage), the three warps meet on a named barrier, and one thread arrives
// on the stage's full barrier, which the consumers wait on as for any tile. Tiles every row
// sees whole keep their NaN / Inf: P V spreads them to exactly the rows that see them.
//
// The parity these warps wait for on vraw is their own count of the cut tiles they took on
// that stage, not the tile's count in the ring: a parity wait tells only the last two
// phases apart, and these warps do not take part in the whole tiles' hand-overs, so they
// may reach a cut tile's wait while the stage is still two or more tiles behind (a whole
// tile not yet acquired: at an item's start, the TMA thread posts the job before its first
// loads), where the ring's parity already reads as complete; or, had whole tiles arrived
// on vraw, the stage could run two phases past a wait still pending. With cut tiles alone
// on vraw neither happens: the next cut tile of a stage is loaded only once the consumers
// released the previous one, after these warps handed it on, so at each wait the stage is
// at most one phase ahead of the count.
//
// The record (BadKeys below) reaches the consumers through a named barrier of its own, not
// through the V stages' full barriers: once per item, the scanning warps (after the item's
// last cut tile) and each consumer warpgroup (after its key loop, before fix_flags reads the
// tag and RowRepair the words) meet on barrier kBarScanRecord0 + cw (scan_record_sync).
// The full barrier alone did order the words in the PTX memory model (each warp's lane 0
// writes its words, the three warps meet on kBarScan, then one thread arrives with release
// semantics and the consumers' wait acquires), but only through that bar.sync's cumulativity
// to a thread that did not write them, and compute-sanitizer racecheck, which does not
// follow it, reported the pairs as hazards (27 on fwd_sm90_bf16_hd64_64x64_s2: the tag's
// STS against fix_flags' LDS, the words' STS against RowRepair's). The bar.sync orders every
// writer before every reader directly, and, for persistent kernels, every read of a slot
// before its next writes (item n + 2's, after the scanning warps' barrier of item n + 1,
// which each consumer reaches after item n's epilogue and second look). The consumers do
// not wait there in practice: the scanning warps reach it right after handing on the item's
// last cut tile, which the consumers had to wait for; the scanning warps wait for the
// consumers' key loop, with nothing to scan meanwhile but the next item's cut tiles, loaded
// after that item's Q.
//
// BadKeys: two slots (items alternate: the n-th item of a CTA uses slot n % 2), each a tag
// word (n + 1 while item n has cleaned keys, or fp8's stamp: tagged; zeroed at the start) and
// Tr::kBadWords words (16-bit: kBlockN / 32 per cut tile, CutTileBits; fp8 none), 16-byte
// aligned. A slot is written again two items later: by then the consumers have read it
// (16-bit: scan_record_sync above; fp8: its writers run only once the producer has loaded
// that item's Q, after the consumers released the Q of the item in between, after their
// epilogue and second look).
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/kernels/params.hpp"
#include "cuda/kernels/sm90/pipeline.cuh"
#include "cuda/kernels/sm90/scheduler.cuh"
#include "cuda/kernels/sm90/smem.cuh"
#include "cuda/parts/nonfinite_v.cuh"

namespace flashcore::cuda::sm90 {

template <class Tr>
struct BadKeys {
  static constexpr int kWords = Tr::kBlockN / 32;
  static constexpr uint32_t kSlotBytes = (4 * (1 + Tr::kBadWords) + 15) / 16 * 16;
  uint32_t base;  // SmemLayout::bad

  __device__ __forceinline__ uint32_t tag(int qi) const { return base + uint32_t(qi & 1) * kSlotBytes; }
  __device__ __forceinline__ uint32_t words(int qi) const { return tag(qi) + 4; }
  // The word of keys 32 w .. of cut tile k (ordinals past the bound share the last tile's).
  __device__ __forceinline__ uint32_t word(int qi, int k, int w) const {
    return words(qi) + 4u * uint32_t((k < Tr::kMaxCut ? k : Tr::kMaxCut - 1) * kWords + w);
  }
  // Records a group's word (keys 32 w .. of cut tile k: their flags) and tags the item where
  // it is not 0. Past the bound the word is all ones (the fix-up then looks at every key).
  __device__ __forceinline__ void record(int qi, int k, int w, uint32_t flags) const {
    ptx::sts32(word(qi, k, w), k < Tr::kMaxCut ? flags : ~0u);
    if (flags != 0) mark(qi);
  }
  __device__ __forceinline__ void mark(int qi) const { ptx::sts32(tag(qi), uint32_t(qi) + 1); }
  // Whether item qi has cleaned keys: its tag is qi + 1, or (fp8 from the pre-pass's or the
  // fused transposer's V^T: the TMA thread's copy_stamp, or its write from wait_vt_head's
  // flag) the call's stamp.
  __device__ __forceinline__ bool tagged(const FwdParams& p, int qi) const {
    const uint32_t x = ptx::lds32(tag(qi));
    return Tr::kFp8 && !Tr::kVtIn ? x == p.vt_stamp : x == uint32_t(qi) + 1;
  }
  // Thread 0, before the CTA's first barrier sync.
  __device__ __forceinline__ void init() const {
    ptx::sts32(tag(0), 0u);
    ptx::sts32(tag(1), 0u);
    for (uint32_t a = base + uint32_t(2 * kSlotBytes); a < base + uint32_t(2 * kSlotBytes) + 32u; a += 4u)
      ptx::sts32(a, 0u);  // SmemLayout::fix_word's
  }
  struct Load {
    __device__ __forceinline__ uint32_t operator()(uint32_t addr) const { return ptx::lds32(addr); }
  };
  // Item qi's cleaned keys as CutTileBits (the fix-up's view).
  __device__ __forceinline__ CutTileBits<Tr::kBlockN, Tr::kMaxCut, Load> bits(int qi, const TileRange& tiles) const {
    return {words(qi), CutTiles(tiles), Tr::kBlockN, Load{}};
  }
};

// Tr::kScanV: the hand-over of an item's record between the scanning warps and consumer
// warpgroup cw (above): a bar.sync of their 96 + 128 threads, once per item on each side.
template <class Tr>
__device__ __forceinline__ void scan_record_sync(int cw) {
  static_assert(Tr::kConsumers <= 3, "barriers kBarScanRecord0 .. 15");
  ptx::named_bar_sync(kBarScanRecord0 + uint32_t(cw), 32 * 3 + 128);
}

template <typename T, class Tr>
struct VScanner {
  static constexpr int kBlockN = Tr::kBlockN, kStages = Tr::kStages, kWarps = 3;
  SmemLayout<Tr> s;

  // Key row r of the tile at `tile`: whether it holds a NaN or Inf. 16 bytes at a time, the
  // row's chunk (i + r) % 8 in turn (a quarter warp's 8 rows: 8 different chunks, so four
  // wavefronts per load, no more). The loop's load latency bounds it, not the bandwidth:
  // with 8-byte loads it took twice as many round trips, and unrolling (two or four loads
  // in flight) does not fit these warps' 24 registers (ptxas reused the registers and
  // serialized the loads at two, spilled at four).
  __device__ __forceinline__ bool row_flagged(uint32_t tile, int r) const {
    uint32_t any = 0;
#pragma unroll 1
    for (int i = 0; i < 8 * Tr::kColBlocks; ++i) {
      const uint4 x = ptx::lds128(tile + uint32_t((i / 8) * kBlockN + r) * 128u + uint32_t(((i + r) & 7) << 4));
      any |= nonfinite_bits<T>(x.x) | nonfinite_bits<T>(x.y) | nonfinite_bits<T>(x.z) | nonfinite_bits<T>(x.w);
    }
    return any != 0;
  }
  // The rare second pass over a flagged row: its NaN / Inf set to 0 in place.
  __device__ __forceinline__ void clean_row(uint32_t tile, int r) const {
#pragma unroll 1
    for (int i = 0; i < 16 * Tr::kColBlocks; ++i) {
      const uint32_t a = tile + uint32_t((i / 16) * kBlockN + r) * 128u + uint32_t(((i + r) & 15) << 3);
      uint2 x = ptx::lds64(a);
      if ((nonfinite_bits<T>(x.x) | nonfinite_bits<T>(x.y)) != 0) {
        x.x = zero_flagged<T>(x.x, nonfinite_bits<T>(x.x));
        x.y = zero_flagged<T>(x.y, nonfinite_bits<T>(x.y));
        ptx::sts64(a, x);
      }
    }
  }

  // The warps' share of cut tile k (ordinal) of item qi, in the V stage at `tile`.
  __device__ __forceinline__ void scan(uint32_t tile, const BadKeys<Tr>& bad, int qi, int k, int warp,
                                       int lane) const {
#pragma unroll 1
    for (int g = warp; g < kBlockN / 32; g += kWarps) {
      const bool flagged = row_flagged(tile, 32 * g + lane);
      if (flagged) clean_row(tile, 32 * g + lane);
      const uint32_t word = __ballot_sync(0xffffffffu, flagged);
      if (lane == 0) bad.record(qi, k, g, word);
    }
  }

  // The items the TMA thread posts (Producer::post_scan), until the last (lo > hi): for each
  // cut tile, wait for its V on its vraw barrier, scan it, hand it on; then the item's record
  // to the consumers (scan_record_sync). The job stays in its
  // slot until the item is done and is read again per tile (registers); the TMA thread
  // needs the slot again two items later, when the consumers are done with this item.
  __device__ __forceinline__ void run() const {
    const Pipeline<2> jobs = s.job_pipe();
    uint32_t vraw_parity = 0;  // bit st: the parity of the next cut tile's phase on stage st's vraw
#pragma unroll 1
    for (int qi = 0;; ++qi) {
      const PipelineState<2> js{qi};
      const uint32_t job = s.job(js.stage());
      jobs.consumer_wait(js);
#pragma unroll 1
      for (int n = int(ptx::lds32(job)), k = 0;; ++n, ++k) {
        const uint4 t = ptx::lds128(job);  // the item's TileRange
        const CutTiles cut(TileRange{int(t.x), int(t.y), int(t.z), int(t.w)});
        if (n == cut.fl) n = cut.fh;  // the whole tiles' V goes straight to the consumers
        if (n >= cut.hi) break;
        const PipelineState<kStages> st{int(ptx::lds32(job + 16u)) - cut.lo + n};
        ptx::mbar_wait(s.vraw(st.stage()), (vraw_parity >> st.stage()) & 1u);
        vraw_parity ^= 1u << st.stage();
        scan(s.v + uint32_t(st.stage()) * Tr::kTileKV, BadKeys<Tr>{s.bad}, qi, k, int(threadIdx.x / 32) - 1,
             int(threadIdx.x % 32));
        ptx::fence_proxy_async();  // the cleaned rows, for wgmma
        ptx::named_bar_sync(kBarScan, 32 * kWarps);
        if (threadIdx.x == 32) ptx::mbar_arrive(s.v_pipe().full(st.stage()));
      }
      const bool last = int(ptx::lds32(job)) > int(ptx::lds32(job + 4u));
      __syncwarp();
      jobs.consumer_release(js, int(threadIdx.x % 32));
      if (last) break;
      // The item's record to each consumer warpgroup (in turn; they reach it in ping-pong order).
#pragma unroll 1
      for (int cw = 0; cw < Tr::kConsumers; ++cw) scan_record_sync<Tr>(cw);
    }
  }
};

}  // namespace flashcore::cuda::sm90
