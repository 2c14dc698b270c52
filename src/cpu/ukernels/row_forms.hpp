// What the x86 row-op sets (rowops_avx2.cpp, rowops_avx512.cpp) share around their kernels:
// - few_queries<kMax>(mq, f): the query count as a compile-time constant, f(std::
//   integral_constant<int, mq>{}) for 1 <= mq <= kMax (returns true), else false: the
//   few-query dot forms are unrolled over the queries.
// - Half: the element type of fp16 rows (their bits), beside float and uint16_t (bf16 bits),
//   on which each set instantiates its dot / axpy templates.
// - f16_dot<dot<Half>>, f16_axpy<axpy<Half>>: those instances under RowOps' 16-bit signatures
//   (uint16_t rows, strides in elements).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace flashcore::cpu::ukernels {

template <int kMax, class F>
inline bool few_queries(int64_t mq, F&& f) {
  return [&]<int... I>(std::integer_sequence<int, I...>) {
    return ((mq == I + 1 ? (f(std::integral_constant<int, I + 1>{}), true) : false) || ...);
  }(std::make_integer_sequence<int, kMax>{});
}

struct Half {
  uint16_t bits;
};

template <void (*Dot)(int64_t, int64_t, const Half*, int64_t, const float*, const float*, int64_t, float*, int64_t)>
void f16_dot(int64_t kc, int64_t d, const uint16_t* x, int64_t xs, const float* q, const float* y, int64_t mq, float* t,
             int64_t ldt) {
  Dot(kc, d, reinterpret_cast<const Half*>(x), xs, q, y, mq, t, ldt);
}
template <void (*Axpy)(int64_t, int64_t, const float*, int64_t, const Half*, int64_t, int64_t, float*, int64_t)>
void f16_axpy(int64_t kc, int64_t mq, const float* p, int64_t ldp, const uint16_t* v, int64_t vs, int64_t n, float* o,
              int64_t ldo) {
  Axpy(kc, mq, p, ldp, reinterpret_cast<const Half*>(v), vs, n, o, ldo);
}

}  // namespace flashcore::cpu::ukernels
