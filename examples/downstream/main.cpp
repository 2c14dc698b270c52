// Smallest useful program against an installed flashcore: causal GQA attention on the
// CPU, checked against the library's fp64 reference. Exit code 0 = agreement.
#include <flashcore/flashcore.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const int64_t B = 2, Sq = 33, Sk = 70, H = 4, Hkv = 2, D = 64;
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  std::vector<float> q(B * Sq * H * D), k(B * Sk * Hkv * D), v(B * Sk * Hkv * D);
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = normal(rng);
  std::vector<float> out(B * Sq * H * D, NAN), ref(out.size(), NAN);

  using flashcore::DType;
  using flashcore::Tensor;
  flashcore::AttentionParams params;
  params.causal = true;  // bottom-right aligned since Sq != Sk
  const Tensor tq = Tensor::contiguous(q.data(), DType::f32, {B, Sq, H, D});
  const Tensor tk = Tensor::contiguous(k.data(), DType::f32, {B, Sk, Hkv, D});
  const Tensor tv = Tensor::contiguous(v.data(), DType::f32, {B, Sk, Hkv, D});
  try {
    flashcore::attention(tq, tk, tv, Tensor::contiguous(out.data(), DType::f32, {B, Sq, H, D}), params);
    flashcore::reference::attention(tq, tk, tv, Tensor::contiguous(ref.data(), DType::f32, {B, Sq, H, D}), params);
  } catch (const flashcore::Error& e) {
    std::fprintf(stderr, "flashcore error: %s\n", e.what());
    return 1;
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += double(out[i] - ref[i]) * double(out[i] - ref[i]);
    den += double(ref[i]) * double(ref[i]);
  }
  const double rel = std::sqrt(num / den);
  std::printf("flashcore %s: causal GQA attention rel_err vs fp64 reference = %.2e\n",
              flashcore::version(), rel);
  return rel < 1e-5 ? 0 : 1;
}
