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
