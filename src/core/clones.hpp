// FC_PORTABLE_CLONES: marks a function of the portable (ISA-agnostic C++) kernels to be
// compiled once per x86-64 ISA level and picked at load time by the CPU's cpuid
// (GCC `target_clones`, resolved through an ifunc): the baseline clone (SSE2 on
// x86-64) runs anywhere, the x86-64-v3 clone (AVX2 + FMA: VEX three-operand forms and
// fused multiply-adds, 2x the mul+add rate of SSE2) where the CPU has it. The source is
// the same; only the code generation differs. The bench's naive baseline and its portable
// ceiling use the same marker, so they are compiled for the same ISA level as the kernels
// they are compared with. Empty off x86-64 or with FLASHCORE_PORTABLE_CLONES=OFF.
#pragma once

// GCC only: flatten, so that everything the function calls is inlined into each clone and
// compiled for that clone's ISA too (a call out would reach the baseline copy). Clang 14
// refuses flatten beside target_clones and left the callees out of line (its v3 clones
// were jumps to the baseline code), so Clang builds (the fuzz target) get the baseline.
#if defined(FC_PORTABLE_CLONES_ON) && defined(__x86_64__) && defined(__ELF__) && \
    defined(__GNUC__) && !defined(__clang__)
#define FC_PORTABLE_CLONES __attribute__((target_clones("default", "arch=x86-64-v3"), flatten))
// The same with an x86-64-v4 (AVX-512) clone as well, for loops measured to gain from 16
// lanes (the softcap's tanh per score: docs/results/cpu-variants-2026-11-29.md).
#define FC_PORTABLE_CLONES_V4 \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4"), flatten))
#define FC_PORTABLE_CLONES_ENABLED 1
#else
#define FC_PORTABLE_CLONES
#define FC_PORTABLE_CLONES_V4
#define FC_PORTABLE_CLONES_ENABLED 0
#endif

namespace flashcore::core {
// The clone the portable kernels run as on this CPU: "x86-64-v3" or "baseline".
inline const char* portable_isa_level() {
#if FC_PORTABLE_CLONES_ENABLED
  // The same test the clones' ifunc resolver makes (GCC, the only compiler that builds
  // the clones): every feature of the x86-64-v3 level present.
  __builtin_cpu_init();
  return __builtin_cpu_supports("x86-64-v3") ? "x86-64-v3" : "baseline";
#else
  return "baseline";
#endif
}
}  // namespace flashcore::core
