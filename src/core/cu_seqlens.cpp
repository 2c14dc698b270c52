#include "core/cu_seqlens.hpp"

#include <algorithm>
#include <string>

#include "core/errors.hpp"

namespace flashcore::core {

void check_cu_seqlens(const int32_t* cu, int64_t batch, int64_t total, const char* name,
                      int64_t* max_len) {
  if (cu[0] != 0) throw_bad_argument(name, "must start at 0, got " + std::to_string(cu[0]));
  int64_t mx = 0;
  for (int64_t b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b])
      throw_bad_argument(name, "must be non-decreasing, but entry " + std::to_string(b + 1) + " (" +
                                   std::to_string(cu[b + 1]) + ") < entry " + std::to_string(b) +
                                   " (" + std::to_string(cu[b]) + ")");
    mx = std::max<int64_t>(mx, cu[b + 1] - cu[b]);
  }
  if (cu[batch] > total)
    throw_bad_argument(name, "last entry " + std::to_string(cu[batch]) + " exceeds the sequence dim " +
                                 std::to_string(total));
  *max_len = mx;
}

}  // namespace flashcore::core
