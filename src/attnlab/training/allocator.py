"""Keep freed host memory inside the process, so large CPU tensors are not page-faulted every step.

glibc's ``malloc`` serves blocks above its mmap threshold (128 KiB, rising to 32 MiB) with an ``mmap``
and returns them to the kernel on ``free``. A training step that allocates the same large tensors
every time (a language model's ``[batch·T, |V|]`` logits and their gradients: 42 MB at
16 × 20 × 33,278) then pays a page fault per 4 KiB page, every step: on the 2-core CPU box,
``torch.zeros_like`` on such a tensor took 35 ms instead of 6 ms, and a training step of the
WikiText-2 LSTM was 1.51× slower than with the memory kept (``benchmarks/bench_allocator.py``).
:func:`keep_freed_memory` tells glibc to serve every block from its heap and not to give freed
memory back, which is what PyTorch's CUDA caching allocator does on the GPU.

The CLI calls it at start-up; Python users may call it themselves. The cost is that the process
holds on to its peak heap until it exits. Set ``ATTNLAB_KEEP_FREED_MEMORY=0`` to leave ``malloc``
as it is; on other C libraries (macOS, musl, Windows) the call does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

# mallopt(3) parameters, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
OPT_OUT_VARIABLE = "ATTNLAB_KEEP_FREED_MEMORY"
_LARGEST_C_INT = 2**31 - 1


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (no ``mmap`` per large block, no trimming).

    Returns True when the setting took effect, False where it does not apply (not glibc, or
    ``ATTNLAB_KEEP_FREED_MEMORY=0``). Safe to call more than once.
    """
    if os.environ.get(OPT_OUT_VARIABLE, "1").strip() == "0":
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    no_mmap = mallopt(M_MMAP_MAX, 0)
    no_trim = mallopt(M_TRIM_THRESHOLD, _LARGEST_C_INT)
    return bool(no_mmap and no_trim)
