import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # for `import reference`

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bf16 cases skip
    BF16 = None

# Tolerances on rel_err = ||out - ref|| / ||ref|| (shared/BENCH.md).
TOL = {"f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}
FAST_EXP_TOL = 1e-2


def np_dtype(name):
    if name == "bf16":
        if BF16 is None:
            pytest.skip("ml_dtypes is not installed (pip install ml-dtypes)")
        return BF16
    return {"f32": np.float32, "f16": np.float16}[name]


@pytest.fixture
def rng(request):
    # A fresh seed per test run; printed on failure so a run can be replayed.
    seed = int(os.environ.get("FLASHCORE_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return np.random.default_rng(seed)


def randn(rng, shape, dtype):
    return rng.standard_normal(shape, dtype=np.float32).astype(dtype)


def qkv_case(rng, dtype, b=2, sq=37, sk=53, h=4, hkv=2, d=32, dv=24):
    """Random q [b, sq, h, d], k [b, sk, hkv, d], v [b, sk, hkv, dv] and dout [b, sq, h, dv]."""
    q = randn(rng, (b, sq, h, d), dtype)
    k = randn(rng, (b, sk, hkv, d), dtype)
    v = randn(rng, (b, sk, hkv, dv), dtype)
    dout = randn(rng, (b, sq, h, dv), dtype)
    return q, k, v, dout
