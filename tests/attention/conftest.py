"""Shared sources for the attender tests: small batches with padding, in float64.

Helpers are exposed as fixtures (factories), never imported, so that this ``conftest`` does not
clash with others in the test tree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

QUERY_DIM = 6
KEY_DIM = 6
VALUE_DIM = 5
LENGTHS = (7, 5, 1, 3)


@dataclass
class Source:
    keys: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor
    lengths: tuple[int, ...]


def _make_source(
    lengths: tuple[int, ...] = LENGTHS,
    source_len: int | None = None,
    key_dim: int = KEY_DIM,
    value_dim: int = VALUE_DIM,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> Source:
    """Random keys / values, right-padded to ``source_len`` (default: the longest length)."""
    generator = torch.Generator().manual_seed(seed)
    source_len = max(lengths) if source_len is None else source_len
    batch = len(lengths)
    keys = torch.randn(batch, source_len, key_dim, generator=generator, dtype=dtype)
    values = torch.randn(batch, source_len, value_dim, generator=generator, dtype=dtype)
    positions = torch.arange(source_len)
    mask = positions[None, :] >= torch.tensor(lengths)[:, None]
    return Source(keys, values, mask, tuple(lengths))


def _make_queries(
    batch: int,
    steps: int,
    query_dim: int = QUERY_DIM,
    dtype: torch.dtype = torch.float64,
    seed: int = 1,
) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, steps, query_dim, generator=generator, dtype=dtype)


@pytest.fixture
def make_source() -> Callable[..., Source]:
    return _make_source


@pytest.fixture
def make_queries() -> Callable[..., torch.Tensor]:
    return _make_queries


@pytest.fixture
def source() -> Source:
    return _make_source()
