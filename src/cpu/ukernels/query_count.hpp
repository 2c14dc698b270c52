// The row ops' query count as a compile-time constant: few_queries<kMax>(mq, f) calls
// f(std::integral_constant<int, mq>{}) for 1 <= mq <= kMax and returns true, else returns
// false (the row ops' few-query forms are unrolled over the queries).
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

}  // namespace flashcore::cpu::ukernels
