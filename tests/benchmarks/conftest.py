"""Shared loading of the benchmark scripts' reference models (``benchmarks/`` is not a package).

The loader is exposed as a fixture (a factory), never imported, so that this ``conftest`` does not
clash with others in the test tree.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS_DIR = Path(__file__).resolve().parents[2] / "benchmarks"


def _load_benchmark_module(filename: str) -> ModuleType:
    """Import ``benchmarks/<filename>`` once per process as ``attnlab_bench_<stem>``."""
    name = f"attnlab_bench_{Path(filename).stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS_DIR / filename)
        assert spec is not None and spec.loader is not None, f"cannot load {BENCHMARKS_DIR / filename}"
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def load_benchmark_module() -> Callable[[str], ModuleType]:
    """``load_benchmark_module("reference_seq2seq.py")``: the module of a file in ``benchmarks/``."""
    return _load_benchmark_module
