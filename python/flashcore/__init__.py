"""flashcore: fused attention kernels for numpy, PyTorch, CuPy and JAX arrays.

    import numpy as np, flashcore
    q = np.random.rand(1, 128, 8, 64).astype(np.float32)   # [B, S, H, D]
    o = flashcore.attention(q, q, q, causal=True)           # [B, S, H, D]

Arrays are read in place through DLPack; outputs are allocated in the inputs'
framework and device. flashcore.attention_backward gives the gradients of attention; on
torch tensors that require grad, flashcore.attention backpropagates by itself. Importing
flashcore never imports torch; `flashcore.torch` registers the ops (with autograd) with
torch.library for torch.compile and CUDA graphs.
"""

from . import _core
from ._api import (attention, attention_backward, attention_with_kvcache, gemm_chain, merge_states,
                   merge_states_n, softmax_v)

__version__ = _core.version()


def list_kernels():
    """Kernels in this build: a list of (key, isa, available_on_this_machine)."""
    return _core.list_kernels()


def built_with_cuda() -> bool:
    """True when this build has the CUDA backend."""
    return _core.built_with_cuda()


def set_force_generic(on: bool) -> None:
    """Force the portable kernels for every later call (FLASHCORE_FORCE_GENERIC=1 at start-up)."""
    _core.set_force_generic(bool(on))


__all__ = ["attention", "attention_backward", "attention_with_kvcache", "merge_states", "merge_states_n", "softmax_v",
           "gemm_chain", "list_kernels", "built_with_cuda", "set_force_generic", "__version__"]
