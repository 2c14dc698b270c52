// The k loop of the 12 x 2-zmm register tile in inline assembly, shared by
// f32_12x2_pf_avx512 (vfmadd231ps: one k step per A row) and f16_12x2_noepi4_avx512fp16
// (vfmadd231ph: one k pair per A row, each zmm 16 columns x 2 k). Both read A as 32-bit
// words A(row, i) at row + 4 i (fp32 values or fp16 k pairs) and a B row as 2 zmm (128
// bytes), so the addressing is the same; only the FMA and the epilogue differ.
//
// Per step (a row of A): 2 loads of B, 12 broadcasts of A (vbroadcastss from memory: load
// ports only), 24 FMAs; registers: acc(i, v) in zmm(2i + v), B in zmm24-25, broadcasts
// alternate zmm26 / zmm27. Two steps per iteration, and one prefetcht0 per step of the A
// row 4 steps ahead: gemm_chain reads A with large strides (the B tile's rows, the
// intermediate's rows), so every step starts a new cache line of A that comes from L2, and
// the hardware prefetchers left the FMA loop waiting for it. A prefetch past the last row of
// A is harmless (prefetches never fault).
//
// Operands the including asm statement names: [a] A (advanced), [b] B (advanced), [as] A's
// row stride in bytes, [k] the number of steps, [p] and [n] scratch (p = the prefetch
// address); FC_X86_12X2_OPERANDS below lists them. The statement clobbers zmm0-27.
#pragma once

#define FC_X86_12X2_ROW(FMA, off, A, bc, x, y)                                               \
  "vbroadcastss " #off A ", %%zmm" #bc "\n\t"                                                 \
  FMA " %%zmm24, %%zmm" #bc ", %%zmm" #x "\n\t"                                               \
  FMA " %%zmm25, %%zmm" #bc ", %%zmm" #y "\n\t"
// (8X2: the first 8 rows, the tail kernels' tile for a block's last rows.)
#define FC_X86_8X2_STEP(FMA, A)                                                               \
  FC_X86_12X2_ROW(FMA, 0, A, 26, 0, 1) FC_X86_12X2_ROW(FMA, 4, A, 27, 2, 3)                   \
  FC_X86_12X2_ROW(FMA, 8, A, 26, 4, 5) FC_X86_12X2_ROW(FMA, 12, A, 27, 6, 7)                  \
  FC_X86_12X2_ROW(FMA, 16, A, 26, 8, 9) FC_X86_12X2_ROW(FMA, 20, A, 27, 10, 11)               \
  FC_X86_12X2_ROW(FMA, 24, A, 26, 12, 13) FC_X86_12X2_ROW(FMA, 28, A, 27, 14, 15)
#define FC_X86_12X2_STEP(FMA, A)                                                              \
  FC_X86_8X2_STEP(FMA, A)                                                                     \
  FC_X86_12X2_ROW(FMA, 32, A, 26, 16, 17) FC_X86_12X2_ROW(FMA, 36, A, 27, 18, 19)             \
  FC_X86_12X2_ROW(FMA, 40, A, 26, 20, 21) FC_X86_12X2_ROW(FMA, 44, A, 27, 22, 23)
// The accumulators' register pairs (x, y) of the 12 (8) C rows, for an epilogue's row macro.
#define FC_X86_8X2_C_ROWS(ROW)                                                                \
  ROW(0, 1) ROW(2, 3) ROW(4, 5) ROW(6, 7) ROW(8, 9) ROW(10, 11) ROW(12, 13) ROW(14, 15)
#define FC_X86_12X2_C_ROWS(ROW)                                                               \
  FC_X86_8X2_C_ROWS(ROW) ROW(16, 17) ROW(18, 19) ROW(20, 21) ROW(22, 23)

// acc = 0, then k steps of STEP (FC_X86_12X2_STEP or FC_X86_8X2_STEP); ends at local label
// 3 with the sums in zmm0-23 (zmm0-15 for 8 rows).
#define FC_X86_KLOOP(FMA, STEP)                                                               \
  "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"                                                         \
  "vmovaps %%zmm0, %%zmm1\n\t"  "vmovaps %%zmm0, %%zmm2\n\t"  "vmovaps %%zmm0, %%zmm3\n\t"    \
  "vmovaps %%zmm0, %%zmm4\n\t"  "vmovaps %%zmm0, %%zmm5\n\t"  "vmovaps %%zmm0, %%zmm6\n\t"    \
  "vmovaps %%zmm0, %%zmm7\n\t"  "vmovaps %%zmm0, %%zmm8\n\t"  "vmovaps %%zmm0, %%zmm9\n\t"    \
  "vmovaps %%zmm0, %%zmm10\n\t" "vmovaps %%zmm0, %%zmm11\n\t" "vmovaps %%zmm0, %%zmm12\n\t"   \
  "vmovaps %%zmm0, %%zmm13\n\t" "vmovaps %%zmm0, %%zmm14\n\t" "vmovaps %%zmm0, %%zmm15\n\t"   \
  "vmovaps %%zmm0, %%zmm16\n\t" "vmovaps %%zmm0, %%zmm17\n\t" "vmovaps %%zmm0, %%zmm18\n\t"   \
  "vmovaps %%zmm0, %%zmm19\n\t" "vmovaps %%zmm0, %%zmm20\n\t" "vmovaps %%zmm0, %%zmm21\n\t"   \
  "vmovaps %%zmm0, %%zmm22\n\t" "vmovaps %%zmm0, %%zmm23\n\t"                                 \
  "lea (%[a], %[as], 4), %[p]\n\t" /* p = A row 4 steps ahead */                              \
  "mov %[k], %[n]\n\t"                                                                        \
  "shr $1, %[n]\n\t"                                                                          \
  "jz 2f\n\t"                                                                                 \
  /* two steps per iteration: B rows j and j+1, A rows a and a + as */                        \
  "1:\n\t"                                                                                    \
  "vmovups 0(%[b]), %%zmm24\n\t"  "vmovups 64(%[b]), %%zmm25\n\t"                             \
  "prefetcht0 (%[p])\n\t"                                                                     \
  STEP(FMA, "(%[a])")                                                                         \
  "vmovups 128(%[b]), %%zmm24\n\t"  "vmovups 192(%[b]), %%zmm25\n\t"                          \
  "prefetcht0 (%[p], %[as], 1)\n\t"                                                           \
  STEP(FMA, "(%[a], %[as], 1)")                                                               \
  "add $256, %[b]\n\t"                                                                        \
  "lea (%[a], %[as], 2), %[a]\n\t"                                                            \
  "lea (%[p], %[as], 2), %[p]\n\t"                                                            \
  "dec %[n]\n\t"                                                                              \
  "jnz 1b\n\t"                                                                                \
  /* odd step count: one more step */                                                         \
  "2:\n\t"                                                                                    \
  "test $1, %[k]\n\t"                                                                         \
  "jz 3f\n\t"                                                                                 \
  "vmovups (%[b]), %%zmm24\n\t"  "vmovups 64(%[b]), %%zmm25\n\t"                              \
  STEP(FMA, "(%[a])")                                                                         \
  "3:\n\t"

// One C row's add (from [p]) or store (to [c]) for an epilogue's row macro: registers x and y
// of kind REG (zmm / ymm), the second HALF bytes on, then the pointer to the next row.
#define FC_X86_12X2_ADD_ROW(x, y, ADD, REG, HALF)                                             \
  ADD " (%[p]), %%" REG #x ", %%" REG #x "\n\t"                                               \
  ADD " " #HALF "(%[p]), %%" REG #y ", %%" REG #y "\n\t"                                      \
  "add %[ldc], %[p]\n\t"
#define FC_X86_12X2_STORE_ROW(x, y, MOV, REG, HALF)                                           \
  MOV " %%" REG #x ", (%[c])\n\t"                                                             \
  MOV " %%" REG #y ", " #HALF "(%[c])\n\t"                                                    \
  "add %[ldc], %[c]\n\t"

// An fp32 C row's add and store (the fp32 kernel; the fp16 kernels' fp32-C forms).
#define FC_X86_F32_ADD_ROW(x, y) FC_X86_12X2_ADD_ROW(x, y, "vaddps", "zmm", 64)
#define FC_X86_F32_STORE_ROW(x, y) FC_X86_12X2_STORE_ROW(x, y, "vmovups", "zmm", 64)

// The end of the kernels: with [accumulate] != 0, ADD_ROW adds each C row (read through
// [p], rows [ldc] bytes apart) into its accumulators; then STORE_ROW stores each row at [c].
// C_ROWS: FC_X86_12X2_C_ROWS or FC_X86_8X2_C_ROWS.
// vzeroupper: the compiler does not know the statement used zmm registers, so it would not
// clean the upper state for the caller's SSE code itself.
#define FC_X86_ADD_STORE(C_ROWS, ADD_ROW, STORE_ROW)                                          \
  "test %[accumulate], %[accumulate]\n\t"                                                     \
  "jz 4f\n\t"                                                                                 \
  "mov %[c], %[p]\n\t"                                                                        \
  C_ROWS(ADD_ROW)                                                                             \
  "4:\n\t"                                                                                    \
  C_ROWS(STORE_ROW)                                                                           \
  "vzeroupper\n\t"

// A kernel function `name` (the GemmFn signature) whose asm statement is BODY: K steps
// (kc, or kc / 2 k pairs), C elements of C_BYTES bytes.
#define FC_X86_12X2_KERNEL(name, K, C_BYTES, BODY)                                            \
  void name(int64_t kc, const void* a, int64_t as, const void* b, void* c, int64_t ldc,       \
            int accumulate) {                                                                 \
    const char* pa = static_cast<const char*>(a);                                             \
    const char* pb = static_cast<const char*>(b);                                             \
    char* pc = static_cast<char*>(c);                                                         \
    const char* pf; /* the prefetch address; then C's rows for the adds */                    \
    int64_t n;      /* iterations of two steps */                                             \
    const int64_t as_bytes = as * 4, ldc_bytes = ldc * (C_BYTES), acc = accumulate;           \
    asm volatile(BODY FC_X86_12X2_OPERANDS(K));                                               \
  }

// The statement's operands: the caller's pa, pb, pc (A, B, C pointers), pf and n (scratch),
// as_bytes, ldc_bytes and acc (accumulate), and K, the number of steps; zmm0-27 clobbered
// (written as xmm: GCC names the vector registers so).
#define FC_X86_12X2_OPERANDS(K)                                                               \
  : [a] "+r"(pa), [b] "+r"(pb), [c] "+r"(pc), [p] "=&r"(pf), [n] "=&r"(n)                     \
  : [k] "r"(K), [as] "r"(as_bytes), [ldc] "r"(ldc_bytes), [accumulate] "r"(acc)               \
  : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",  \
    "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", \
    "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "cc", "memory"
