#include "cpu/dispatch/dispatch.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/errors.hpp"
#include "core/force_generic.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

namespace flashcore::cpu {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::generic: return "generic";
    case Isa::avx512f: return "avx512f";
    case Isa::avx512fp16: return "avx512fp16";
    case Isa::avx512bf16: return "avx512bf16";
    case Isa::amx_bf16: return "amx_bf16";
    case Isa::sve: return "sve";
    case Isa::avx2: return "avx2";
  }
  return "?";
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kmajor: return "kmajor";
    case Layout::kpairs: return "kpairs";
    case Layout::rows: return "rows";
  }
  return "?";
}

namespace {

#if defined(__x86_64__) || defined(_M_X64)
uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

// Linux refuses AMX tile data to a process that has not asked for it (the XSTATE
// permission system, kernel >= 5.16): ask once; no permission means no AMX.
bool request_amx_permission() {
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long bitmask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) != 0) return false;
  return (bitmask & (1ul << kXfeatureXtiledata)) != 0;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  if (!osxsave) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;   // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
  const bool ymm_state = (xcr0 & 0x6) == 0x6;     // SSE, AVX
  const bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = ymm_state && fma && f16c && ((b >> 5) & 1);
  if (zmm_state) {
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512fp16 = f.avx512bw && f.avx512vl && ((d >> 23) & 1);
  }
  const bool amx_bf16_bit = (d >> 22) & 1, amx_tile_bit = (d >> 24) & 1;
  unsigned a1, b1, c1, d1;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  f.avx512bf16 = f.avx512f && f.avx512bw && f.avx512vl && ((a1 >> 5) & 1);
  // OS support first (XCR0 tile bits may be off until permission is granted on Linux).
  if (amx_bf16_bit && amx_tile_bit) f.amx_bf16 = request_amx_permission();
  (void)tile_state;
#endif
#if defined(__aarch64__) && defined(__linux__)
  constexpr unsigned long kHwcapSve = 1ul << 22;
  if (getauxval(AT_HWCAP) & kHwcapSve) {
    f.sve = true;
    constexpr int kPrSveGetVl = 51, kPrSveVlLenMask = 0xffff;
    const int vl = prctl(kPrSveGetVl, 0, 0, 0, 0);
    f.sve_bits = vl > 0 ? (vl & kPrSveVlLenMask) * 8 : 0;
  }
#endif
  return f;
}

#define FC_GEMM_UKERNEL(key_, isa_, ab_, acc_, mr_, nr_, ka_, al_, bl_)           \
  {#key_, Isa::isa_,  DType::ab_,     DType::acc_, mr_, nr_, ka_, &ukernels::key_, \
   Layout::al_,       Layout::bl_},
const GemmUkernel kGemm[] = {
#include "cpu/ukernels/gemm.inc"
};
#undef FC_GEMM_UKERNEL

#define FC_GEMM_PANEL(kernel_, key_, max_k_) {&ukernels::kernel_, &ukernels::key_, max_k_},
const GemmPanel kPanels[] = {
#include "cpu/ukernels/gemm_panels.inc"
};
#undef FC_GEMM_PANEL

// A kernel and the kernel a table pairs with it (its tail, stream form or fp32-C form).
struct KernelPair {
  GemmFn kernel, other;
};
#define FC_GEMM_TAIL(kernel_, tail_) {&ukernels::kernel_, &ukernels::tail_},
const KernelPair kTails[] = {
    {nullptr, nullptr},  // (a build without x86 kernels lists no tail)
#include "cpu/ukernels/gemm_tails.inc"
};
#undef FC_GEMM_TAIL

#define FC_GEMM_STREAM(kernel_, form_) {&ukernels::kernel_, &ukernels::form_},
const KernelPair kStreams[] = {
    {nullptr, nullptr},  // (a build without AMX kernels lists none)
#include "cpu/ukernels/gemm_streams.inc"
};
#undef FC_GEMM_STREAM

#define FC_GEMM_C32(kernel_, form_) {&ukernels::kernel_, &ukernels::form_},
const KernelPair kC32[] = {
    {nullptr, nullptr},  // (a build without AVX512-FP16 kernels lists none)
#include "cpu/ukernels/gemm_c32.inc"
};
#undef FC_GEMM_C32

#define FC_VECOPS(key_, isa_) &ukernels::key_,
const VecOps* const kVec[] = {
#include "cpu/ukernels/vecops.inc"
};
#undef FC_VECOPS

#define FC_ROWOPS(key_, isa_) &ukernels::key_,
const RowOps* const kRows[] = {
#include "cpu/ukernels/rowops.inc"
};
#undef FC_ROWOPS

// Automatic choice: the first available kernel in auto_table.inc for the storage dtype
// whose operand dtype holds it exactly (f32 operands hold every storage dtype); pairs
// (key2: the P V kernel) for attention only.
struct AutoEntry { DType storage; const char* key; const char* key2; };
#define FC_AUTO(storage_, key_) {DType::storage_, #key_, nullptr},
#define FC_AUTO_PAIR(storage_, key_, key2_) {DType::storage_, #key_, #key2_},
const AutoEntry kAuto[] = {
#include "cpu/dispatch/auto_table.inc"
};
#undef FC_AUTO
#undef FC_AUTO_PAIR

const GemmUkernel* find_gemm(const char* key) {
  for (const auto& k : kGemm)
    if (std::strcmp(k.key, key) == 0) return &k;
  return nullptr;
}

bool holds_exactly(DType kernel_ab, DType storage) {
  return kernel_ab == storage || kernel_ab == DType::f32;
}

// The function a KernelPair table pairs with k, or null.
template <size_t N>
GemmFn paired_fn(const KernelPair (&table)[N], const GemmUkernel& k) {
  for (const KernelPair& t : table)
    if (t.kernel != nullptr && t.kernel == k.fn) return t.other;
  return nullptr;
}
// The listed kernel a KernelPair table pairs with k, or null.
template <size_t N>
const GemmUkernel* paired_kernel(const KernelPair (&table)[N], const GemmUkernel& k) {
  if (const GemmFn other = paired_fn(table, k); other != nullptr)
    for (const GemmUkernel& g : kGemm)
      if (g.fn == other) return &g;
  return nullptr;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

void prepare_gemm(Isa isa) {
#if defined(FC_BUILD_AMX)
  if (isa == Isa::amx_bf16) ukernels::amx_configure_tiles();
#else
  (void)isa;
#endif
}

bool isa_available(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::generic: return true;
    case Isa::avx512f: return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
    case Isa::avx512fp16: return f.avx512fp16;
    // The bf16 kernels run beside AVX-512F + AVX512-BF16 softmax ops (vecops_avx512bf16,
    // vecops_amx): every AMX CPU so far has both.
    case Isa::avx512bf16: return f.avx512bf16 && isa_available(Isa::avx512f);
    case Isa::amx_bf16: return f.amx_bf16 && isa_available(Isa::avx512bf16);
    case Isa::sve: return f.sve;
    case Isa::avx2: return f.avx2;
  }
  return false;
}

int gemm_ukernel_count() { return int(sizeof(kGemm) / sizeof(kGemm[0])); }
const GemmPanel* gemm_panel(const GemmUkernel& k) {
  for (const GemmPanel& p : kPanels)
    if (p.kernel == k.fn) return &p;
  return nullptr;
}
const GemmUkernel* gemm_tail(const GemmUkernel& k) { return paired_kernel(kTails, k); }
const GemmUkernel* gemm_stream(const GemmUkernel& k) { return paired_kernel(kStreams, k); }
bool is_gemm_stream_form(const GemmUkernel& k) {
  for (const KernelPair& t : kStreams)
    if (t.other != nullptr && t.other == k.fn) return true;
  return false;
}
int64_t gemm_stream_chunk(const GemmUkernel& k) {
  constexpr int64_t kStripBytes = 32768;
  const int64_t es = int64_t(dtype_size(k.ab));
  return std::max<int64_t>(k.k_align, kStripBytes / (k.mr * es) / k.k_align * k.k_align);
}
GemmFn gemm_c32(const GemmUkernel& k) { return paired_fn(kC32, k); }
const GemmUkernel& gemm_ukernel(int i) { return kGemm[i]; }
int vecops_count() { return int(sizeof(kVec) / sizeof(kVec[0])); }
const VecOps& vecops(int i) { return *kVec[i]; }
int rowops_count() { return int(sizeof(kRows) / sizeof(kRows[0])); }
const RowOps& rowops(int i) { return *kRows[i]; }

namespace {

// A kernel named by `impl` (one key of it), checked as a forced kernel.
const GemmUkernel* forced_gemm(const std::string& key, DType storage) {
  const GemmUkernel* g = find_gemm(key.c_str());
  if (g == nullptr)
    throw_error(Status::invalid_argument,
                std::string("impl: no CPU micro-kernel named '") + key + "' in this build");
  if (!isa_available(g->isa))
    throw_error(Status::unsupported, std::string("impl: kernel '") + key + "' needs ISA " +
                                         isa_name(g->isa) + ", which this CPU lacks");
  if (!holds_exactly(g->ab, storage) && g->ab != DType::f16 && g->ab != DType::bf16)
    throw_error(Status::unsupported, std::string("impl: kernel '") + key +
                                         "' cannot take operands stored as " + to_string(storage));
  return g;
}

// Vector ops of the same ISA as the GEMM kernel when there are some, else portable.
const VecOps* vec_for(const GemmUkernel* g, bool generic_only) {
  const VecOps* vec = nullptr;
  for (const VecOps* v : kVec)
    if (v->isa == g->isa && isa_available(v->isa)) vec = v;
  return vec == nullptr || generic_only ? &ukernels::vecops_generic : vec;
}

}  // namespace

CpuConfig select_kernels(DType storage, const char* impl, bool pair) {
  CpuConfig cfg;
  const bool generic_only = core::force_generic();
  if (impl != nullptr && impl[0] != '\0' && std::strcmp(impl, "auto") != 0) {
    const std::string name(impl);
    const size_t plus = name.find('+');
    if (plus != std::string::npos && !pair)
      throw_error(Status::invalid_argument, std::string("impl: '") + impl +
                                                "' names a kernel pair, which only attention takes");
    cfg.gemm = forced_gemm(name.substr(0, plus), storage);
    if (plus != std::string::npos) cfg.gemm2 = forced_gemm(name.substr(plus + 1), storage);
  } else {
    // A listed kernel this call may run: in the build, on this CPU, holding the storage
    // (a pair's kernels: bf16 holds fp16 as two parts, attention's Split of Q, K and V).
    auto runnable = [&](const char* key, bool in_pair) -> const GemmUkernel* {
      const GemmUkernel* g = find_gemm(key);
      if (g == nullptr || !isa_available(g->isa)) return nullptr;
      if (!holds_exactly(g->ab, storage) && !(in_pair && g->ab == DType::bf16 && storage == DType::f16)) return nullptr;
      return generic_only && g->isa != Isa::generic ? nullptr : g;
    };
    for (const AutoEntry& e : kAuto) {
      if (cfg.gemm != nullptr) break;
      if (e.storage != storage || (e.key2 != nullptr && !pair)) continue;
      const GemmUkernel* g = runnable(e.key, e.key2 != nullptr);
      if (g == nullptr || g->acc != DType::f32) continue;
      // the P V kernel may sum in fp16: P <= 1 (see the table)
      const GemmUkernel* g2 = e.key2 != nullptr ? runnable(e.key2, true) : nullptr;
      if (e.key2 != nullptr && g2 == nullptr) continue;
      cfg.gemm = g;
      cfg.gemm2 = g2;
    }
    if (cfg.gemm == nullptr) cfg.gemm = find_gemm("f32_4x16_generic");
  }
  cfg.vec = vec_for(cfg.gemm, generic_only);
  if (cfg.gemm2 != nullptr) cfg.vec2 = vec_for(cfg.gemm2, generic_only);
  // Row ops (decode path): portable with a portable GEMM kernel, else the last available
  // set of the list (SIMD ISAs without a set of their own use the portable one).
  cfg.rows = &ukernels::rowops_generic;
  if (cfg.gemm->isa != Isa::generic && !generic_only)
    for (const RowOps* r : kRows)
      if (isa_available(r->isa)) cfg.rows = r;
  return cfg;
}

}  // namespace flashcore::cpu
