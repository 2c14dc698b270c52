// flashcore's basic types: dtypes, devices, strategies, status codes and the error they
// raise, and the strided tensor view. Included by flashcore.hpp (the public API) and by the
// library's core layer (src/core), which needs these and nothing else of the API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#pragma GCC visibility push(default)
namespace flashcore {

enum class DType : int { f32 = 0, f16 = 1, bf16 = 2, e4m3 = 3, e5m2 = 4, i32 = 5 };
enum class Device : int { cpu = 0, cuda = 1 };

// Softmax strategies of the seeds (docs/cpu.md). For `attention`, `online` is the
// fully fused FlashAttention path (Q K^T, softmax, P V tile by tile, S never stored);
// `two_pass` and `three_pass` keep one query block's score strip [MR x Sk].
enum class Strategy : int { automatic = 0, two_pass = 1, three_pass = 2, online = 3 };
enum class Exp2Mode : int { exact = 0, fast = 1 };

enum class Status : int {
  ok = 0,
  invalid_argument = 1,  // shape, stride, dtype, null pointer, aliasing
  unsupported = 2,       // valid request this build/device cannot run (dtype, head dim, backend)
  device_error = 3,      // CUDA launch/runtime failure
  internal_error = 4,
};

class Error : public std::runtime_error {
 public:
  Error(Status code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Status code() const noexcept { return code_; }

 private:
  Status code_;
};

constexpr int kMaxRank = 4;

// A non-owning strided view. shape/strides are in elements, rank <= 4.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int rank = 0;
  int64_t shape[kMaxRank] = {0, 0, 0, 0};
  int64_t strides[kMaxRank] = {0, 0, 0, 0};

  // Contiguous (row-major) view of the given shape.
  static Tensor contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           Device device = Device::cpu);
  int64_t numel() const;
};

// Names the library uses in messages and in kernel keys ("f32", "bf16", ...).
const char* to_string(DType d);
const char* to_string(Strategy s);
const char* to_string(Exp2Mode m);
size_t dtype_size(DType d);

}  // namespace flashcore
#pragma GCC visibility pop
