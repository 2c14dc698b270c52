// Named suites. "default" is what a bare `flashcore-bench` runs: under a minute on a
// 2-core CPU, every strategy with its breakdown, every op, and the portable kernels' fp32 row beside
// the naive baseline.
#include <string>
#include <vector>

#include "bench.hpp"
#include "cpu/dispatch/dispatch.hpp"

namespace fcbench {
namespace {

Config att(const char* label, const char* strategy, const char* dtype, int64_t b, int64_t h,
           int64_t hkv, int64_t sq, int64_t sk, int64_t d, bool causal = false) {
  Config c;
  c.label = label;
  c.op = "attention";
  c.strategy = strategy;
  c.dtype = dtype;
  c.batch = b; c.heads = h; c.kv_heads = hkv; c.seq_q = sq; c.seq_k = sk; c.head_dim = d;
  c.causal = causal;
  c.check = true;
  return c;
}

Config smv(const char* label, const char* strategy, int64_t m, int64_t l, int64_t d) {
  Config c;
  c.label = label;
  c.op = "softmax-v";
  c.strategy = strategy;
  c.batch = 1; c.heads = 1; c.seq_q = m; c.seq_k = l; c.head_dim = d;
  c.check = true;
  return c;
}

// gemm-chain E[M,N] = (A[M,K1] B[K1,K2]) C[K2,N] with K1 = N = d (BENCH.md's mapping).
Config gemm_chain(int64_t m, int64_t k2, int64_t d) {
  Config c;
  c.label = "gemm-chain";
  c.op = "gemm-chain";
  c.batch = 1; c.heads = 1; c.seq_q = m; c.seq_k = k2; c.head_dim = d;
  c.check = true;
  return c;
}

void default_suite(std::vector<Config>& out) {
  // The three strategies (and auto) on one attention shape.
  for (const char* s : {"two-pass", "three-pass", "online", "auto"})
    out.push_back(att((std::string("att-") + s).c_str(), s, "f32", 1, 2, 2, 1024, 1024, 128));
  out.push_back(att("att-causal", "auto", "f32", 1, 2, 2, 1024, 1024, 128, true));
  out.push_back(att("att-f16", "auto", "f16", 1, 2, 2, 1024, 1024, 128));
  out.push_back(att("att-bf16", "auto", "bf16", 1, 2, 2, 1024, 1024, 128));
  // GQA 4:1, Sq != Sk (bottom-right causal), fast exp.
  Config gqa = att("att-gqa-fastexp", "auto", "f32", 2, 8, 2, 256, 1024, 64, true);
  gqa.exp = "fast";
  out.push_back(gqa);
  // Decode: one query per head, GQA 4:1 (the query rows of a KV head share its K/V
  // stream), judged in GB/s against the memory read bandwidth, beside the naive baseline.
  Config dec = att("decode-gqa", "auto", "f32", 1, 32, 8, 1, 8192, 128);
  dec.vs_naive = true;
  out.push_back(dec);
  // Decode over a paged KV cache (attention_with_kvcache, pages of 16 keys in a random
  // order), bf16, GQA 4:1, in GB/s against the memory read bandwidth.
  Config paged = att("decode-paged16", "auto", "bf16", 8, 32, 8, 1, 4096, 128);
  paged.op = "decode";
  paged.page_size = 16;
  out.push_back(paged);
  // softmax-v: seed 000's headline case (M=12, L=32768, d=256) at f32, each strategy.
  for (const char* s : {"two-pass", "three-pass", "online"})
    out.push_back(smv((std::string("smv-") + s).c_str(), s, 12, 32768, 256));
  // gemm-chain: the seeds' fused double GEMM block (M=K1=N=256, K2=8192).
  out.push_back(gemm_chain(256, 8192, 256));
  // attention's backward (dq, dk, dv from out and lse), and a causal GQA training step
  // (forward + backward) in bf16.
  Config bwd = att("att-backward", "auto", "f32", 1, 2, 2, 1024, 1024, 128);
  bwd.op = "attention-backward";
  out.push_back(bwd);
  Config step = att("att-fwd+bwd", "auto", "bf16", 1, 4, 2, 512, 512, 64, true);
  step.pass = "fwd+bwd";
  out.push_back(step);
  // The portable kernels beside the naive baseline (2 threads each, calls interleaved,
  // same inputs).
  Config ours = att("portable-vs-naive", "auto", "f32", 1, 8, 8, 2048, 2048, 128);
  ours.threads = 2;
  ours.vs_naive = true;
  ours.portable = true;
  out.push_back(ours);
}

// A few seconds: every op once, small shapes (for scripts and smoke tests).
void quick_suite(std::vector<Config>& out) {
  for (const char* s : {"two-pass", "three-pass", "online"})
    out.push_back(att((std::string("att-") + s).c_str(), s, "f32", 1, 2, 1, 128, 256, 64));
  out.push_back(smv("smv", "auto", 12, 4096, 128));
  out.push_back(gemm_chain(64, 1024, 64));
}

// One GEMM-only row per micro-kernel in the kernel list (skipped rows say why).
void ukernel_suite(std::vector<Config>& out) {
  for (int i = 0; i < flashcore::cpu::gemm_ukernel_count(); ++i) {
    const flashcore::cpu::GemmUkernel& k = flashcore::cpu::gemm_ukernel(i);
    Config c;
    c.label = k.key;
    c.op = "gemm-ukernel";
    c.impl = k.key;
    c.dtype = flashcore::to_string(k.ab);
    c.batch = 1; c.heads = 1; c.seq_q = k.mr; c.seq_k = 512; c.head_dim = 256;
    c.threads = 1;
    c.check = true;
    out.push_back(c);
  }
}

}  // namespace

const char* suite_names() { return "default, quick, ukernels"; }

bool suite_configs(const std::string& name, std::vector<Config>& out, std::string& err) {
  if (name == "default") default_suite(out);
  else if (name == "quick") quick_suite(out);
  else if (name == "ukernels") ukernel_suite(out);
  else {
    err = "unknown suite '" + name + "' (have: " + suite_names() + ")";
    return false;
  }
  return true;
}

}  // namespace fcbench
