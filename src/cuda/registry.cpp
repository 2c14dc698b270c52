// The instance registry (registry.hpp): instances_fwd.inc (and attention_with_kvcache's
// instances_kvc.inc) expanded into the launchers' declarations, the policy's InstanceInfo
// tables and the launcher tables, each in one order.
#include "cuda/registry.hpp"

#include <cstring>
#include <iterator>

namespace flashcore::cuda {

#define FC_SM80_INST(key, dt, hd, bm, bn, wp, st, oc) cudaError_t key(const FwdParams&, cudaStream_t);
#define FC_SM90_INST(key, dt, hd, bm, bn, st, ps) cudaError_t key(const FwdParams&, cudaStream_t);
#include "instances_fwd.inc"
#include "instances_kvc.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST

namespace {

const InstanceInfo kInstances[] = {
#define FC_SM80_INST FC_SM80_INSTANCE_INFO
#define FC_SM90_INST FC_SM90_INSTANCE_INFO
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

const InstanceInfo kKvcInstances[] = {
#define FC_SM80_INST FC_SM80_INSTANCE_INFO
#define FC_SM90_INST FC_SM90_KVC_INSTANCE_INFO
#include "instances_kvc.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};
const LaunchFn kKvcLaunchers[] = {
#define FC_SM80_INST(key, dt, hd, bm, bn, wp, st, oc) key,
#define FC_SM90_INST(key, dt, hd, bm, bn, st, ps) key,
#include "instances_kvc.inc"
#undef FC_SM80_INST
#undef FC_SM90_INST
};
static_assert(std::size(kKvcInstances) == std::size(kKvcLaunchers), "one launcher per instance");

}  // namespace

InstanceList instances() { return kInstances; }

const InstanceInfo* find_key(const char* key) {
  for (const InstanceInfo& i : kInstances)
    if (std::strcmp(i.key, key) == 0) return &i;
  return nullptr;
}

LaunchFn launcher(const InstanceInfo& i) {
  for (size_t j = 0; j < std::size(kKvcInstances); ++j)
    if (&kKvcInstances[j] == &i) return kKvcLaunchers[j];
  return kLaunchers[&i - kInstances];
}

InstanceList kvcache_instances() { return kKvcInstances; }

}  // namespace flashcore::cuda
