#!/usr/bin/env python3
"""Checks every kernel key in the kernel lists against the naming grammar (docs/naming.md).

CPU GEMM micro-kernels:  {ab}_{MR}x{NR}{_variant}*_{isa}
  ab      operand dtype: f32 | f16 | bf16
  MR, NR  tile rows x columns; NR counts vectors for SIMD ISAs, elements for generic and AMX
  variant optional lower-case tokens (noepi4, swp, ...)
  isa     generic | avx2 | avx512 | avx512fp16 | avx512bf16 | amx | sve, matching the list's isa column
  (an entry whose layout columns are not kmajor | kpairs | rows for A, kmajor | kpairs for B
  is reported as malformed)
Vector-op sets:          vecops_{isa}
Exits non-zero and names each offending key.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
UK = ROOT / "src" / "cpu" / "ukernels"
# key suffix -> Isa enum value in the list's isa column
ISA_OF_SUFFIX = {"generic": "generic", "avx2": "avx2", "avx512": "avx512f", "avx512fp16": "avx512fp16",
                 "avx512bf16": "avx512bf16", "amx": "amx_bf16", "sve": "sve"}
GEMM_KEY = re.compile(r"^(f32|f16|bf16)_(\d+)x(\d+)((?:_[a-z0-9]+)*)_(" + "|".join(ISA_OF_SUFFIX) + r")$")
GEMM_ENTRY = re.compile(r"^\s*FC_GEMM_UKERNEL\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(kmajor|kpairs|rows)\s*,\s*(kmajor|kpairs)\s*\)")
VEC_ENTRY = re.compile(r"^\s*FC_VECOPS\(\s*(\w+)\s*,\s*(\w+)\s*\)")


def main() -> int:
    errors, seen = [], set()
    for path in sorted(UK.glob("*.inc")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{n}"
            m = GEMM_ENTRY.match(line)
            if not m and line.lstrip().startswith("FC_GEMM_UKERNEL("):
                errors.append(f"{where}: malformed FC_GEMM_UKERNEL entry (columns: key, isa, ab, acc, MR, NR, k_align, A layout, B layout)")
            if m:
                key, isa, ab = m.group(1), m.group(2), m.group(3)
                k = GEMM_KEY.match(key)
                if not k:
                    errors.append(f"{where}: '{key}' does not follow {{ab}}_{{MR}}x{{NR}}{{_variant}}_{{isa}}")
                else:
                    if k.group(1) != ab:
                        errors.append(f"{where}: '{key}' names dtype {k.group(1)} but the ab column is {ab}")
                    if ISA_OF_SUFFIX[k.group(5)] != isa:
                        errors.append(f"{where}: '{key}' ends in {k.group(5)} but the isa column is {isa}")
                    if k.group(2) != m.group(5):
                        errors.append(f"{where}: '{key}' names MR {k.group(2)} but the MR column is {m.group(5)}")
                if key in seen:
                    errors.append(f"{where}: '{key}' is listed twice")
                seen.add(key)
            m = VEC_ENTRY.match(line)
            if m:
                key, isa = m.group(1), m.group(2)
                suffix = key[len("vecops_"):] if key.startswith("vecops_") else None
                if suffix is None or ISA_OF_SUFFIX.get(suffix) != isa:
                    errors.append(f"{where}: '{key}' should be vecops_{{isa suffix}} matching isa column {isa}")
    for e in errors:
        print(e, file=sys.stderr)
    print(f"check_names: {len(seen)} GEMM keys checked, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
