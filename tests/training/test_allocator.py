"""keep_freed_memory: glibc keeps freed blocks, so a large tensor's pages are not faulted anew."""

from __future__ import annotations

import platform
import statistics
import subprocess
import sys

import pytest

from attnlab.training import allocator

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# A child process allocates, fills and frees a 64 MiB block 12 times (with glibc's malloc, as
# PyTorch's CPU allocator does) and prints the minor page faults of each time. Served by mmap, every
# allocation faults all of its 16,384 pages again; kept in the heap, only the first ones do.
PAGE_FAULTS = """
import ctypes, resource, sys
from attnlab.training.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 64 * 2**20
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _steady_page_faults(mode: str) -> float:
    """The median page faults of allocations 5-12 (after the heap has grown)."""
    result = subprocess.run(
        [sys.executable, "-c", PAGE_FAULTS, mode], capture_output=True, text=True, check=True
    )
    return statistics.median(int(line) for line in result.stdout.split()[4:])


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_kept_memory_is_not_page_faulted_again() -> None:
    pages = 64 * 2**20 // 4096
    assert _steady_page_faults("system") >= 0.9 * pages
    assert _steady_page_faults("keep") <= 0.1 * pages


def test_opt_out_variable_leaves_malloc_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(allocator.OPT_OUT_VARIABLE, "0")
    assert allocator.keep_freed_memory() is False


def test_other_c_libraries_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(allocator.OPT_OUT_VARIABLE, raising=False)
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", ""))
    assert allocator.keep_freed_memory() is False


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_takes_effect_on_glibc_and_may_be_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(allocator.OPT_OUT_VARIABLE, raising=False)
    assert allocator.keep_freed_memory() is True
    assert allocator.keep_freed_memory() is True
