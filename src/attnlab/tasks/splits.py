"""Random splits of a list of examples, reproducible from a seed."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from attnlab.checks import check_int

T = TypeVar("T")


def random_hold_out(items: Sequence[T], size: int, seed: int) -> tuple[list[T], list[T]]:
    """Hold ``size`` items chosen at random (``random.Random(seed)``) out of ``items``.

    Returns ``(kept, held)``, both in their original order. The caller checks that ``size`` leaves
    both parts non-empty where it needs that. ``seed`` must be an int (``random.Random(None)``
    would seed from the clock, and a float or a string from its hash or bytes: not the reproducible
    split this promises); ``size`` an int in ``[0, len(items)]``.
    """
    check_int("seed", seed, minimum=None)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= len(items):
        raise ValueError(f"size must be an int in [0, {len(items)}] (the items to hold out), got {size!r}")
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    held = set(order[:size])
    return [item for i, item in enumerate(items) if i not in held], [items[i] for i in sorted(held)]
