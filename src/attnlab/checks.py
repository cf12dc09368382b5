"""Argument checks shared by the library's public functions and modules."""

from __future__ import annotations


def check_int(name: str, value: object, *, minimum: int | None = 1, owner: str = "") -> None:
    """Raise a ``ValueError`` naming ``name`` (after ``owner``, if given) unless ``value`` is an
    int of at least ``minimum`` (any int with ``None``). A bool is not taken for an int, nor is a
    float that happens to be whole: a size of ``2.0`` or ``True`` is a mistake somewhere upstream."""
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        prefix = f"{owner}: " if owner else ""
        raise ValueError(f"{prefix}{name} must be an int{bound}, got {value!r}")
