// CPU feature detection (once) and the kernel tables built from the .inc lists.
#pragma once

#include <cstdint>
#include <string>

#include "cpu/ukernels/ukernel.hpp"

namespace flashcore::cpu {

struct CpuFeatures {
  bool avx2 = false;       // AVX2 + FMA + F16C with the OS saving ymm state
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512fp16 = false, avx512bf16 = false;
  bool amx_bf16 = false;   // CPUID bit *and* the kernel granted tile-data permission
  bool sve = false;
  int sve_bits = 0;        // SVE vector length, 0 without SVE
};

const CpuFeatures& cpu_features();  // detected on first call
bool isa_available(Isa isa);

// Every kernel this build compiled, available or not (tests and bench walk these).
int gemm_ukernel_count();
const GemmUkernel& gemm_ukernel(int i);
// The panel form of kernel k (gemm_panels.inc), or null.
const GemmPanel* gemm_panel(const GemmUkernel& k);
// The tail kernel of kernel k (gemm_tails.inc), or null.
const GemmUkernel* gemm_tail(const GemmUkernel& k);
// The stream form of kernel k (gemm_streams.inc: B loads that hint no reuse, for a B panel
// one row block reads once), or null; whether k is some kernel's stream form; and the k
// rows per call of a stream form: its A strip (MR rows of them) within 32 KiB, which stays
// in L1 across the panels while B streams past (AMX: 512 keys).
const GemmUkernel* gemm_stream(const GemmUkernel& k);
bool is_gemm_stream_form(const GemmUkernel& k);
int64_t gemm_stream_chunk(const GemmUkernel& k);
// The fp32-C form of fp16-summing kernel k (gemm_c32.inc), or null.
GemmFn gemm_c32(const GemmUkernel& k);
int vecops_count();
const VecOps& vecops(int i);
int rowops_count();
const RowOps& rowops(int i);

// Chosen kernels for one call.
struct CpuConfig {
  const GemmUkernel* gemm = nullptr;
  const VecOps* vec = nullptr;
  const RowOps* rows = nullptr;  // the decode path's row ops
  // attention only: a second kernel for P V (stage 2), with its vector ops (exp2_pack
  // writes P in its layout); null when `gemm` runs both stages.
  const GemmUkernel* gemm2 = nullptr;
  const VecOps* vec2 = nullptr;
};

// Best available kernels for operands stored as `storage`. `impl` (a GEMM key) forces a
// kernel: unknown keys and kernels the CPU cannot run raise flashcore::Error naming it.
// With `pair` (attention), `impl` may name two keys "k1+k2" (Q K^T on k1, P V on k2), and
// `auto` may pick a pair from auto_table.inc; otherwise a pair is refused.
CpuConfig select_kernels(DType storage, const char* impl, bool pair = false);

}  // namespace flashcore::cpu
