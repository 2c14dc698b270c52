// FwdSm90Config: the tile, shared-memory, register and schedule constants of one sm90
// forward instance (the kernel and launcher take them as FwdSm90Traits<T, ...>, by storage
// type), by element size and fp8-ness so that plain C++ without the CUDA headers reads them
// too: the registry (registry.cpp) and the policy's tests (tests/cuda/policy_test.cpp) take
// each instance's shared memory and CTAs per SM from here instead of a mirrored formula.
#pragma once

namespace flashcore::cuda {

template <int kElemBytes, bool kIsFp8, int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, int kVariant_>
struct FwdSm90Config {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_, kStages = kStages_;
  static constexpr int kVariant = kVariant_;
  static constexpr bool kFp8 = kIsFp8;
  // kVariant (the instance row's last column): 0 plain, 1 persistent ("_p"), 2 (fp8, 64-row
  // tiles) V^T made in the kernel ("_vt", kVtIn below), 3 (16-bit) the score variants'
  // kernel ("_sv", kScoreMod: softcap and ALiBi on each tile's scores, the sink joined to
  // each row; FwdParams::variants), 4 both persistent and the score variants' ("_p_sv").
  static constexpr bool kPersistent = kVariant == 1 || kVariant == 4;
  static constexpr bool kScoreMod = kVariant == 3 || kVariant == 4;
  static constexpr int kElem = kElemBytes;
  static constexpr int kColElems = 128 / kElem;  // elements per 128-byte column block
  static constexpr int kConsumers = kBlockM / 64;  // consumer warpgroups
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // 128-byte column blocks per row; a head dim that is not a multiple of 64 (96) is
  // padded to whole blocks in shared memory: TMA fills the columns past D with zeros.
  // fp8's V^T tile (kHeadDim rows of kBlockN keys) has the same size as a K tile when
  // kHeadDim is a multiple of 128.
  static constexpr int kColBlocks = (kHeadDim + kColElems - 1) / kColElems;
  static constexpr int kTileQ = kBlockM * kColBlocks * 128;
  static constexpr int kTileKV = kBlockN * kColBlocks * 128;
  // fp8's V^T made in the kernel (kVtIn, the "_vt" rows): the producer's TMA thread brings V
  // itself in sub-tiles of 64 keys (one 8 KiB 128-byte-swizzled box per column block) into
  // a ring of kRawSlots slots (32 KiB), and the producer's other three warps (kVtWarps)
  // write each one, transposed and in fp8_vt_key's order, as one 64-key column block of the
  // V^T stage, in the layout the V^T workspace's TMA gives (64-byte rows, 64-byte swizzle).
  // Without it the pre-pass (vt_fp8.cu) writes V^T to a workspace that TMA reads. The
  // transposing warps keep up with a memory-bound kernel (decode: B32 H32/8 Sk4096 D128,
  // 163 -> 80 us on an H200) but not with the tensor cores: 128-row tiles ran 0.45-0.6x of
  // the pre-pass's speed from S2048 (docs/results/cuda-sm90-fp8-2026-11-22.md, 2026-11-26,
  // b9f90f3), and 0.70-0.80x with the ldmatrix / stmatrix transposer (2026-11-27, 5ab2442) and a 64 KiB ring (at
  // hd256 two stages leave the transposer one tile's time between a stage's release and
  // its P V).
  static constexpr int kVtWarps = 3;
  static constexpr int kRawSub = 64 * kColBlocks * 128;
  static constexpr int kRawBytes = 32768, kRawSlots = kRawBytes / kRawSub;
  static constexpr bool kVtIn = kVariant == 2;
  // V's NaN / Inf at keys a mask hides from some rows (kernels/sm90/bad_keys.cuh): the
  // 16-bit kernels keep no record (rows whose O comes out non-finite are computed again);
  // fp8's V^T makers clean what they write, and a tag per item (two slots of 16 bytes, items
  // alternate) says which items' rows take V's NaN back. Then 32 bytes of the epilogue's
  // RowRepair words (SmemLayout::fix_word).
  static constexpr int kBadBytes = (kFp8 ? 2 * 16 : 0) + 32;
  static constexpr int kBarriers = 2 + 4 * kStages + (kVtIn ? 2 * kRawSlots : 0);  // q, full_k[], full_v[], empty_k[], empty_v[], empty_q[, raw_full[], raw_empty[]]
  static constexpr int kSmemRing = kTileQ + 2 * kStages * kTileKV + 8 * kBarriers + kBadBytes + 1024;
  // + 1024: the dynamic shared memory base is aligned up to the swizzle's 1024 bytes.
  // The TMA-store epilogue stages O in Q's buffer, or (kPersistent: the producer loads the
  // next item's Q meanwhile) in a buffer of its own, kTileO (16-bit kernels): all of O where
  // that fits beside the ring (227 KiB per CTA), else (hd256) half of it, O going out in
  // kOPasses = 2 passes of half its column blocks, the second once the first's stores read
  // the buffer (kSmem's static_assert says when half does not fit either). (Until 2026-11-26
  // (10b6cc6) hd256 staged O in Q's buffer, which the producer could refill only once the stores
  // had read O out of it: the next item's first S waited for that and for Q's load;
  // docs/results/cuda-sm90-2026-11-22.md.)
  // fp8 (16-bit O, twice Q's bytes) stages O in a buffer of its own, all of it or half
  // (kOPasses) where that fits the CTA's share (one CTA per SM for two consumers, two for
  // one: kFp8OwnO); else (the 64x192 and _vt tiles, one item per CTA) in Q's buffer, half of
  // O per pass; else (none so far) kOStaged is false and the registers store O.
  static constexpr int kSmemNoO = kSmemRing + (kVtIn ? kRawBytes : 0);
  static constexpr int kOColBlocks = (kHeadDim + 63) / 64;   // O's 64-column blocks (16-bit)
  static constexpr int kOBytes = kBlockM * kOColBlocks * 128;  // kTileQ, or 2 kTileQ for fp8
  static constexpr int kFp8SmemCap = kConsumers > 1 ? 232448 : 233472 / 2 - 1024;
  static constexpr int kOPassesFp8 = kSmemNoO + kOBytes <= kFp8SmemCap ? 1 : 2;
  static constexpr bool kFp8OwnO = kFp8 && kSmemNoO + kOBytes / kOPassesFp8 <= kFp8SmemCap;
  static constexpr bool kFp8OInQ = kFp8 && !kFp8OwnO && !kPersistent && kOBytes == 2 * kTileQ;
  static constexpr bool kOStaged = !kFp8 || kFp8OwnO || kFp8OInQ;  // O through shared memory
  static constexpr int kOPasses = kFp8 ? (kFp8OwnO ? kOPassesFp8 : kFp8OInQ ? 2 : 1)
                                       : (!kPersistent || kSmemNoO + kTileQ <= 232448 ? 1 : 2);
  static constexpr int kTileO = (kFp8 ? kFp8OwnO : kPersistent) ? kOBytes / kOPasses : 0;
  // fp8 persistent kernels: V^T made during the kernel by the producer's three spare warps
  // (kVtFused; used where the launcher passes FwdParams::vt_sync, else the pre-pass's
  // workspace is read as before): each warp takes units of 32 keys x 128 columns of V
  // from a queue, stages one in shared memory (kVtStage: rows 144 bytes apart) and writes
  // it transposed to the V^T workspace; the TMA thread waits for a head's units before
  // its first V^T load. Where the staging fits beside the ring and O's buffer (hd128).
  static constexpr int kVtStage = 32 * 144;
  static constexpr bool kVtFused = kFp8 && kPersistent && kSmemNoO + kTileO + 3 * kVtStage <= kFp8SmemCap;
  static constexpr int kSmem = kSmemNoO + kTileO + (kVtFused ? 3 * kVtStage : 0);
  // setmaxnreg: the producer keeps 24 registers (kVtIn: 48, the transposing warps', who also
  // clean the cut tiles' NaN; with 40 ptxas spilled there), the consumers share the rest of
  // what the CTA got at launch (its threads times the per-thread count that __launch_bounds__
  // leaves for `ctas` CTAs per SM, a multiple of 8).
  static constexpr int kProducerRegs = kVtIn ? 48 : 24;
  static constexpr int consumer_regs(int ctas) {
    return ((65536 / ctas / kThreads / 8 * 8) * kThreads / 128 - kProducerRegs) / kConsumers / 8 * 8;
  }
  // 64-row tiles (one consumer warpgroup) run several CTAs per SM, so one CTA's prologue,
  // epilogue and softmax overlap the others' GEMMs: three where the shared memory of three
  // fits and the consumer's registers (136) hold O, S and P with 32 to spare (hd64 with
  // 64-key tiles), else two; taller tiles one.
  // P's registers (one operand of kBlockN keys: 4 registers per 16 keys, 32 for fp8).
  static constexpr int kPRegs = kBlockN * 4 / (kFp8 ? 32 : 16);
  static constexpr bool kThree = kConsumers == 1 && 3 * (kSmem + 1024) <= 233472 &&
                                 consumer_regs(3) - (kHeadDim / 2 + kBlockN / 2 + kPRegs) >= 32;
  static constexpr int kCtasPerSm = kConsumers > 1 ? 1 : kThree ? 3 : 2;
  static constexpr int kConsumerRegs = consumer_regs(kCtasPerSm);
  // Ping-pong between the consumer warpgroups (FlashAttention-3's inter-warpgroup
  // schedule): each issues its GEMMs of a key tile only in its turn, handed round through
  // named barriers 1 .. kConsumers, so one warpgroup's softmax runs while another's GEMMs
  // do. Measured on an H200 with two consumers, same run: 2-10% faster than without on 35
  // of the 36 hd64/hd128 f16/bf16 rows (docs/results/cuda-sm90-2026-11-22.md, step 5).
  static constexpr bool kPingPong = kConsumers >= 2;
  // The speculative softmax (OnlineSoftmax::try_update) writes P_n while P_{n-1} V_{n-1}
  // still reads P_{n-1}: two P operands in registers (kPRegs each), taken where the
  // consumer's registers hold them beside O (kHeadDim / 2), S (kBlockN / 2) and 32 more
  // (40 for the persistent item loop). With them, the 192-row hd64 tile (160 registers per
  // consumer, 0 left) spilled 348 bytes; the persistent hd128 128x128 one (48 left) spills
  // 52 bytes outside the main loop and ran 1.02-1.11x faster with them than without (H100);
  // the persistent hd64 64x64 one (40 left, three CTAs per SM) does not spill. Not with
  // kOPasses > 1 in a persistent kernel: the persistent hd256 one (48 left) spilled inside
  // its main loop with them. fp8's persistent hd128 128x192 one (32 left) takes them at the
  // non-persistent threshold (no spills): H200, Sk = 1024 .. 16384, back to back, 1.05-1.21x
  // its speed without them on randn inputs, 0.98-1.03x on the timing tool's wider codes
  // (2026-11-27, 6c606da).
  // The hd256 score-variant kernel ("_sv", 128x64) spilled 24 bytes with them (ptxas,
  // 2026-11-29): it runs without.
  static constexpr bool kSpeculate = !(kScoreMod && kHeadDim > 128) && (kOPasses == 1 || !kPersistent) &&
                                     kConsumerRegs - (kHeadDim / 2 + kBlockN / 2 + 2 * kPRegs) >= (kPersistent && !kFp8 ? 40 : 32);
  // fp8 kernels that speculate have a second compiled form (fwd_sm90_kernel's kChord), which
  // the launcher takes for FwdParams::exp_chord (Exp2Mode::fast without lse).
  static constexpr bool kChordForm = kFp8 && kSpeculate;
  // Persistent fp8 kernels: S = Q K^T with Q's fragments in registers (RS wgmma;
  // kHeadDim / 8 registers, loaded once per item, after which Q's buffer is released, so
  // the producer loads the next item's Q during this one), where O, S, P and they leave
  // the consumer 32 registers: hd128 128x128_s2_p (H200: 1.01-1.03x; the plain 128x128 and
  // 64x128 kernels with it 0.99-1.02x: not taken; docs/results/cuda-sm90-fp8-2026-11-22.md,
  // 2026-11-27, bae29fb).
  static constexpr bool kQRegs = kFp8 && kPersistent &&
                                 kConsumerRegs - (kHeadDim / 2 + kBlockN / 2 + (kSpeculate ? 2 : 1) * kPRegs + kHeadDim / 8) >= 32;
  static_assert(kHeadDim % 32 == 0 && kBlockM % 64 == 0 && kBlockN % 32 == 0 && kBlockN <= 256, "tile shape");
  static_assert(kConsumers <= 4, "named barriers 1 .. kConsumers");
  static_assert(!kVtIn || (kFp8 && kConsumers == 1), "V^T in the kernel: fp8, 64-row tiles (their producer's 48 registers)");
  static_assert(!kScoreMod || !kFp8, "the score variants' kernel: 16-bit");
  static_assert(!kFp8 || (kHeadDim % 128 == 0 && kBlockN % 64 == 0), "fp8: whole column blocks");
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536 / kCtasPerSm, "register file");
  static_assert(kCtasPerSm * (kSmem + 1024) <= 233472 && kSmem <= 232448, "shared memory (228 KiB per SM, 227 per CTA)");
  static_assert(kOColBlocks % kOPasses == 0, "O's passes: whole column blocks");
};

}  // namespace flashcore::cuda
