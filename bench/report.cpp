// Output: a markdown table (seed 000's phase columns) and one JSON object per row.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "bench.hpp"
#include "flashcore/flashcore.hpp"

namespace fcbench {

double tolerance(const Config& c) {
  // BENCH.md: fp32 exact 1e-5, fp32 fast exp 1e-2, fp16/bf16 1e-2, fp8 6e-2.
  if (c.dtype == "e4m3") return 6e-2;
  if (c.dtype == "f16" || c.dtype == "bf16") return 1e-2;
  if (c.exp == "fast") return 1e-2;
  return 1e-5;
}

namespace {

std::string fmt(const char* f, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Microseconds with a precision that suits the magnitude.
std::string fmt_us(double us) { return fmt(us >= 100 ? "%.0f" : us >= 1 ? "%.1f" : "%.2f", us); }

std::string shape(const Config& c) {
  // snprintf rather than string operator+: GCC 12 -O3 warns falsely (-Wrestrict) on the latter.
  char buf[256];
  const long long m = c.batch * c.heads * c.seq_q;
  if (c.op == "softmax-v" || c.op == "gemm-ukernel") {
    std::snprintf(buf, sizeof buf, "M%lld L%lld d%lld", m, (long long)c.seq_k, (long long)c.head_dim);
  } else if (c.op == "gemm-chain") {
    std::snprintf(buf, sizeof buf, "M%lld K1=N=%lld K2=%lld", m, (long long)c.head_dim, (long long)c.seq_k);
  } else {
    char heads[48], seq[64];
    if (c.kv_heads != c.heads) std::snprintf(heads, sizeof heads, "H%lld/%lld", (long long)c.heads, (long long)c.kv_heads);
    else std::snprintf(heads, sizeof heads, "H%lld", (long long)c.heads);
    if (c.seq_q == c.seq_k) std::snprintf(seq, sizeof seq, "S%lld", (long long)c.seq_q);
    else std::snprintf(seq, sizeof seq, "Sq%lld Sk%lld", (long long)c.seq_q, (long long)c.seq_k);
    char variants[24];
    std::snprintf(variants, sizeof variants, "%s%s%s", c.alibi ? " alibi" : "", c.sinks ? " sinks" : "",
                  c.softcap > 0.0f ? " softcap" : "");
    std::snprintf(buf, sizeof buf, "B%lld %s %s D%lld%s%s", (long long)c.batch, heads, seq,
                  (long long)c.head_dim, c.causal ? " causal" : "", variants);
  }
  return buf;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') { o += '\\'; o += ch; }
    else if (static_cast<unsigned char>(ch) < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", ch); o += b; }
    else o += ch;
  }
  return o + "\"";
}
std::string json_num(double v) { return std::isnan(v) || std::isinf(v) ? "null" : fmt("%.6g", v); }

}  // namespace

void print_table(const std::vector<Result>& rows, bool show_peaks) {
  std::printf("| row | op | dtype | shape | strategy | kernel | thr | p50 us | p90 us | GFLOP/s | "
              "%% peak | rel_err | pack | max | exp+pack | gemm | norm | note |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::map<std::string, double> peaks;
  int i = 0;
  for (const Result& r : rows) {
    ++i;
    const Config& c = r.cfg;
    const std::string label = c.label.empty() ? std::to_string(i) : c.label;
    const std::string dt = c.dtype + (c.exp == "fast" ? "/fastexp" : "");
    if (!r.error.empty()) {
      std::printf("| %s | %s | %s | %s | %s | %s | %d | - | - | - | - | - | - | - | - | - | - | "
                  "%s%s |\n", label.c_str(), c.op.c_str(), dt.c_str(), shape(c).c_str(),
                  c.strategy.c_str(), c.impl.c_str(), c.threads, r.skipped ? "" : "error: ", r.error.c_str());
      continue;
    }
    if (!r.peak_name.empty()) peaks[r.peak_name] = r.peak_gflops;
    std::string err = fmt("%.1e", r.rel_err);
    if (!std::isnan(r.tol) && !r.check_ok) err += " FAIL";
    std::string note = r.note;
    auto add = [&note](const std::string& s) { if (!s.empty()) note += (note.empty() ? "" : "; ") + s; };
    if (!std::isnan(r.gbps))
      add(fmt("%.1f GB/s", r.gbps) + fmt(" = %.0f%% of mem read", r.pct_mem) + fmt(" %.1f GB/s", r.mem_gbps));
    if (!std::isnan(r.pct_peak_paired)) add(fmt("paired %.1f%% of peak", r.pct_peak_paired));
    if (!std::isnan(r.speedup_vs_naive)) add(fmt("%.1fx vs naive", r.speedup_vs_naive));
    if (c.prepacked) add(c.op == "softmax-v" ? "V pre-packed (not timed)" : "B, C pre-packed (not timed)");
    if (!std::isnan(r.speedup_vs_unpacked)) add(fmt("%.2fx vs unpacked", r.speedup_vs_unpacked));
    if (!std::isnan(r.speedup_vs_contiguous)) add(fmt("%.2fx vs contiguous", r.speedup_vs_contiguous));
    add(r.check_subset);
    if (c.portable && !flashcore::force_generic()) add("portable kernels forced");
    if (c.strategy == "auto" && ((c.op == "attention" && c.pass == "fwd") || c.op == "softmax-v") && c.impl != "naive")
      add("auto chose " + r.strategy_ran);
    const Phases& p = r.phases;
    auto ph = [&p](double v) { return p.present ? fmt_us(v) : std::string("-"); };
    const std::string op = c.pass == "fwd+bwd" ? c.op + " fwd+bwd" : c.op;
    std::printf("| %s | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                label.c_str(), op.c_str(), dt.c_str(), shape(c).c_str(), r.strategy_ran.c_str(),
                r.kernel.c_str(), c.threads, fmt_us(r.p50_us).c_str(), fmt_us(r.p90_us).c_str(),
                fmt("%.1f", r.gflops).c_str(), fmt("%.1f", r.pct_peak).c_str(), err.c_str(),
                ph(p.pack_us).c_str(), ph(p.max_us).c_str(), ph(p.exp_us).c_str(),
                ph(p.gemm_us).c_str(), ph(p.norm_us).c_str(), note.c_str());
  }
  if (show_peaks) {
    std::printf("\nPeaks (measured at start-up, best of 41 x 2 ms FMA loops per ISA and thread count):");
    for (const auto& [name, gf] : peaks) std::printf("  %s = %.1f GFLOP/s", name.c_str(), gf);
    if (peaks.empty()) std::printf(" none");
    std::printf("\nPhase columns: us per call, each thread's time averaged over threads "
                "(PhaseTimes, separate calls from the timed ones). softmax-v GFLOP/s counts "
                "2*M*L*d (exps not counted).\n\n");
  }
}

void print_json(const Result& r) {
  const Config& c = r.cfg;
  std::string s = "{";
  auto kv = [&s](const char* k, const std::string& v) {
    if (s.size() > 1) s += ", ";
    s += json_str(k) + ": " + v;
  };
  kv("op", json_str(c.op));
  if (c.op == "attention" || c.op == "attention-backward") kv("pass", json_str(c.pass));
  kv("backend", json_str(c.backend));
  kv("impl", json_str(c.impl));
  kv("kernel", json_str(r.kernel));
  kv("strategy", json_str(r.strategy_ran.empty() ? c.strategy : r.strategy_ran));
  kv("strategy_requested", json_str(c.strategy));
  kv("dtype", json_str(c.dtype));
  kv("exp", json_str(c.exp));
  kv("B", std::to_string(c.batch));
  kv("H", std::to_string(c.heads));
  kv("Hkv", std::to_string(c.kv_heads));
  kv("Sq", std::to_string(c.seq_q));
  kv("Sk", std::to_string(c.seq_k));
  kv("D", std::to_string(c.head_dim));
  kv("causal", c.causal ? "true" : "false");
  if (c.op == "attention" || c.op == "attention-backward") {
    kv("softcap", json_num(c.softcap));
    kv("alibi", c.alibi ? "true" : "false");
    kv("sinks", c.sinks ? "true" : "false");
  }
  kv("threads", std::to_string(c.threads));
  kv("iters", std::to_string(r.iters));
  kv("p50_us", json_num(r.p50_us));
  kv("p90_us", json_num(r.p90_us));
  kv("gflops", json_num(r.gflops));
  kv("pct_peak", json_num(r.pct_peak));
  if (!std::isnan(r.pct_peak_paired)) kv("pct_peak_paired", json_num(r.pct_peak_paired));
  kv("peak_name", r.peak_name.empty() ? "null" : json_str(r.peak_name));
  kv("peak_gflops", json_num(r.peak_gflops));
  if (c.check && r.error.empty()) {
    kv("rel_err", json_num(r.rel_err));
    kv("rel_tol", json_num(r.tol));
    kv("check_ok", r.check_ok ? "true" : "false");
    kv("check_subset", json_str(r.check_subset.empty() ? "all" : r.check_subset));
  }
  if (r.phases.present) {
    const Phases& p = r.phases;
    kv("phases_us", "{\"pack\": " + json_num(p.pack_us) + ", \"max_find\": " + json_num(p.max_us) +
                        ", \"exp_pack\": " + json_num(p.exp_us) + ", \"gemm\": " +
                        json_num(p.gemm_us) + ", \"normalize\": " + json_num(p.norm_us) + "}");
    kv("phases_basis", json_str("mean per thread, separate calls"));
  }
  if (c.op == "decode") kv("page_size", std::to_string(c.page_size));
  if (c.tile_m > 0) kv("tile", json_str(std::to_string(c.tile_m) + "x" + std::to_string(c.tile_n)));
  if (!std::isnan(r.speedup_vs_naive)) kv("speedup_vs_naive", json_num(r.speedup_vs_naive));
  if (c.prepacked) kv("prepacked", "true");
  if (!std::isnan(r.speedup_vs_unpacked)) kv("speedup_vs_unpacked", json_num(r.speedup_vs_unpacked));
  if (!std::isnan(r.speedup_vs_contiguous)) kv("speedup_vs_contiguous", json_num(r.speedup_vs_contiguous));
  if (!std::isnan(r.gbps)) {
    kv("gbps", json_num(r.gbps));
    kv("mem_read_gbps", json_num(r.mem_gbps));
    kv("pct_mem_read", json_num(r.pct_mem));
  }
  if (!c.label.empty()) kv("label", json_str(c.label));
  if (c.portable) kv("portable_forced", "true");
  if (!r.note.empty()) kv("note", json_str(r.note));
  if (!r.error.empty()) kv(r.skipped ? "skipped" : "error", json_str(r.error));
  kv("seed", std::to_string(r.seed));
  std::printf("%s}\n", s.c_str());
}

}  // namespace fcbench
