// merge_states on the CPU: every output row (b, s, h) merged from its n parts by merge_row
// (strategies.hpp, the same combine as the pipelines' split over keys), rows spread over the
// threads. A row's lse values and O rows are all read before its output row and lse are
// written, so an output that is exactly one part's view (the API allows no other overlap)
// is merged in place.
#include <omp.h>

#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "cpu/pipelines/common.hpp"
#include "cpu/pipelines/pack.hpp"
#include "cpu/pipelines/pipelines.hpp"
#include "cpu/pipelines/strategies.hpp"

namespace flashcore::cpu {

void merge_states(const core::MergeProblem& p) {
  const int64_t rows = p.batch * p.s * p.heads, d = p.d;
  const int64_t es_in = int64_t(dtype_size(p.part_dtype)), es_out = int64_t(dtype_size(p.out_dtype));
  const int nthreads = int(std::min<int64_t>(resolve_threads(p.threads), std::max<int64_t>(1, rows)));
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<float> acc(static_cast<size_t>(d)), conv(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / (p.s * p.heads), i = r / p.heads % p.s, h = r % p.heads;
      const MergedRow merged = merge_row(
          p.n,
          [&](int64_t s) {
            const core::StatePart& sp = p.parts[s];
            return MergedRow{sp.lse[b * sp.lse_sb + h * sp.lse_sh + i], 1.0f};
          },
          [&](int64_t s, float w, float* a) {
            const core::Operand4& o = p.parts[s].o;
            const void* src = at(o.data, b * o.sb + i * o.ss + h * o.sh, es_in);
            const float* x = static_cast<const float*>(src);
            if (p.part_dtype != DType::f32) {
              core::convert_row(src, p.part_dtype, d, conv.data());
              x = conv.data();
            }
            for (int64_t j = 0; j < d; ++j) a[j] += w * x[j];
          },
          acc.data(), d);
      const float lse = finish_row(merged, nullptr, acc.data(), d);
      core::convert_row(acc.data(), d, static_cast<char*>(p.o) + (b * p.o_sb + i * p.o_ss + h * p.o_sh) * es_out,
                        p.out_dtype);
      p.lse[b * p.lse_sb + h * p.lse_sh + i] = lse;
    }
  }
}

}  // namespace flashcore::cpu
