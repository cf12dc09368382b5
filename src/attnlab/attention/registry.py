"""Attenders by name, so configs and the CLI pick a mechanism with one string."""

from __future__ import annotations

import inspect
from typing import Any

from attnlab.attention.base import Attender
from attnlab.attention.content import AdditiveAttender, MultiplicativeAttender, ScaledDotAttender
from attnlab.attention.location import LocationAttender
from attnlab.attention.mix import MixAttender
from attnlab.attention.positional import TransformerAttender, TransformerXLAttender

ATTENDERS: dict[str, type[Attender]] = {
    "additive": AdditiveAttender,
    "multiplicative": MultiplicativeAttender,
    "scaled_dot": ScaledDotAttender,
    "transformer": TransformerAttender,
    "transformer_xl": TransformerXLAttender,
    "location": LocationAttender,
    "mix": MixAttender,
}


def attender_options(name: str) -> list[str]:
    """The keyword options the attender called ``name`` accepts beyond its dimensions."""
    signature = inspect.signature(_attender_class(name).__init__)
    skip = {"self", "query_dim", "key_dim", "value_dim"}
    return [param for param in signature.parameters if param not in skip]


def build_attender(
    name: str, query_dim: int, key_dim: int, value_dim: int | None = None, **options: Any
) -> Attender:
    """Build the attender registered as ``name``; unknown names or options raise ``ValueError``."""
    cls = _attender_class(name)
    valid = attender_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for attender {name!r}; valid options: {valid}"
        )
    return cls(query_dim, key_dim, value_dim, **options)


def _attender_class(name: str) -> type[Attender]:
    if name not in ATTENDERS:
        raise ValueError(f"unknown attender {name!r}; choose one of {sorted(ATTENDERS)}")
    return ATTENDERS[name]
