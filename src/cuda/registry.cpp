// The instance registry (registry.hpp): instances_fwd.inc expanded into the launchers'
// declarations, the policy's InstanceInfo table and the launcher table, in one order.
#include "cuda/registry.hpp"

#include <cstring>
#include <iterator>

namespace flashcore::cuda {

#define FC_SM80_INST(key, dt, hd, bm, bn, wp, st, oc) cudaError_t key(const FwdParams&, cudaStream_t);
#define FC_SM90_INST(key, dt, hd, bm, bn, st, ps) cudaError_t key(const FwdParams&, cudaStream_t);
#include "instances_fwd.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST

namespace {

// Instance dtype keys -> storage dtype (tf32: fp32 storage on TF32 tensor cores).
constexpr DType dtype_f16 = DType::f16, dtype_bf16 = DType::bf16, dtype_tf32 = DType::f32, dtype_e4m3 = DType::e4m3;
const InstanceInfo kInstances[] = {
#define FC_SM80_INST(key, dt, hd, bm, bn, wp, st, oc) sm80_instance(#key, dtype_##dt, hd, bm, bn, wp, st),
#define FC_SM90_INST(key, dt, hd, bm, bn, st, ps) sm90_instance<dtype_##dt, hd, bm, bn, st, ps>(#key),
#include "instances_fwd.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};
const LaunchFn kLaunchers[] = {
#define FC_SM80_INST(key, dt, hd, bm, bn, wp, st, oc) key,
#define FC_SM90_INST(key, dt, hd, bm, bn, st, ps) key,
#include "instances_fwd.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};
static_assert(std::size(kInstances) == std::size(kLaunchers), "one launcher per instance");

}  // namespace

InstanceList instances() { return kInstances; }

const InstanceInfo* find_key(const char* key) {
  for (const InstanceInfo& i : kInstances)
    if (std::strcmp(i.key, key) == 0) return &i;
  return nullptr;
}

LaunchFn launcher(const InstanceInfo& i) { return kLaunchers[&i - kInstances]; }

}  // namespace flashcore::cuda
