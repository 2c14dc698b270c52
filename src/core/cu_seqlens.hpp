// The host-side check of a varlen call's cu_seqlens array, shared by the argument checks
// (CPU arrays) and the CUDA backend (a host copy of device arrays).
#pragma once

#include <cstdint>

namespace flashcore::core {

// cu[0] == 0, non-decreasing, cu[batch] <= total; sets *max_len to the longest sequence.
// Throws flashcore::Error (invalid_argument) naming `name` otherwise.
void check_cu_seqlens(const int32_t* cu, int64_t batch, int64_t total, const char* name,
                      int64_t* max_len);

}  // namespace flashcore::core
