// The out-of-line parts of the basic types (include/flashcore/types.hpp).
#include "flashcore/types.hpp"

#include <cstdint>

namespace flashcore {

Tensor Tensor::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                          Device device) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = int(shape.size() < size_t(kMaxRank) ? shape.size() : size_t(kMaxRank));
  int i = 0;
  for (int64_t s : shape) {
    if (i >= kMaxRank) break;
    t.shape[i++] = s;
  }
  int64_t stride = 1;  // (saturating: shapes past int64 are refused by the checks, by name)
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    if (__builtin_mul_overflow(stride, t.shape[d] > 0 ? t.shape[d] : 1, &stride)) stride = INT64_MAX;
  }
  return t;
}

// A zero extent makes 0 whatever the others are; a product past int64 (hostile shapes,
// which the checks refuse by name) saturates at INT64_MAX instead of overflowing.
int64_t Tensor::numel() const {
  if (rank <= 0) return 0;
  int64_t n = 1;
  bool over = false;
  for (int i = 0; i < rank && i < kMaxRank; ++i) {
    if (shape[i] == 0) return 0;
    if (!over && __builtin_mul_overflow(n, shape[i], &n)) over = true;
  }
  return over ? INT64_MAX : n;
}

const char* to_string(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i32: return "i32";
  }
  return "unknown";
}
const char* to_string(Strategy s) {
  switch (s) {
    case Strategy::automatic: return "auto";
    case Strategy::two_pass: return "two-pass";
    case Strategy::three_pass: return "three-pass";
    case Strategy::online: return "online";
  }
  return "unknown";
}
const char* to_string(Exp2Mode m) { return m == Exp2Mode::fast ? "fast" : "exact"; }

size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::e4m3: case DType::e5m2: return 1;
  }
  return 0;
}

}  // namespace flashcore
