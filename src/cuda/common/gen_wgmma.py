#!/usr/bin/env python3
# Prints the wgmma wrappers of src/cuda/common/ptx_sm90.cuh (their operand lists are long):
#   python3 src/cuda/common/gen_wgmma.py   -> paste between the '(generated' line and the setmaxnreg part
def regs(n, start=0):
    return ", ".join(f"%{start+i}" for i in range(n))
def outs(n, c="+f"):
    return ", ".join(f'"{c}"(d[{i//4}][{i%4}])' for i in range(n))
out = []
for N in (64, 128):
    R = N // 2
    for ty, nm in (("__half", "f16"), ("__nv_bfloat16", "bf16")):
        # SS: A and B from shared memory (descriptors), both K-major.
        out.append(f"""template <>
__device__ __forceinline__ void wgmma_ss<{N}, {ty}>(float (&d)[{N // 8}][4], uint64_t a, uint64_t b, int scale_d) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{R + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{nm}.{nm} "
      "{{{regs(R)}}}, %{R}, %{R + 1}, p, 1, 1, 0, 0;\\n}}\\n"
      : {outs(R)}
      : "l"(a), "l"(b), "r"(scale_d));
}}""")
        # SS, D = A B: the accumulators are outputs only (no register of D is an input,
        # so whatever defined them before cannot serialize the wgmma pipeline).
        out.append(f"""template <>
__device__ __forceinline__ void wgmma_ss_zero<{N}, {ty}>(float (&d)[{N // 8}][4], uint64_t a, uint64_t b) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, 0, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{nm}.{nm} "
      "{{{regs(R)}}}, %{R}, %{R + 1}, p, 1, 1, 0, 0;\\n}}\\n"
      : {outs(R, "=f")}
      : "l"(a), "l"(b));
}}""")
        # RS: A from registers, B from shared memory, B N-major (transposed).
        out.append(f"""template <>
__device__ __forceinline__ void wgmma_rs_bt<{N}, {ty}>(float (&d)[{N // 8}][4], const uint32_t (&a)[4], uint64_t b,
                                                      int scale_d) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{R + 5}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{nm}.{nm} "
      "{{{regs(R)}}}, {{%{R}, %{R + 1}, %{R + 2}, %{R + 3}}}, %{R + 4}, p, 1, 1, 1;\\n}}\\n"
      : {outs(R)}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
}}""")
print("\n".join(out))
