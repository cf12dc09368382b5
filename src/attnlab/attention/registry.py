"""Attenders by name, so configs and the CLI pick a mechanism with one string."""

from __future__ import annotations

from typing import Any

from attnlab.attention.base import Attender, construct, option_names
from attnlab.attention.content import AdditiveAttender, MultiplicativeAttender, ScaledDotAttender
from attnlab.attention.location import LocationAttender
from attnlab.attention.mix import MixAttender
from attnlab.attention.positional import TransformerAttender, TransformerXLAttender
from attnlab.attention.shift import ShiftAttender
from attnlab.checks import did_you_mean

ATTENDERS: dict[str, type[Attender]] = {
    "additive": AdditiveAttender,
    "multiplicative": MultiplicativeAttender,
    "scaled_dot": ScaledDotAttender,
    "transformer": TransformerAttender,
    "transformer_xl": TransformerXLAttender,
    "location": LocationAttender,
    "mix": MixAttender,
    "shift": ShiftAttender,
}


def attender_options(name: str) -> list[str]:
    """The keyword options the attender called ``name`` accepts beyond its dimensions."""
    return option_names(_attender_class(name))


def build_attender(
    name: str, query_dim: int, key_dim: int, value_dim: int | None = None, **options: Any
) -> Attender:
    """Build the attender registered as ``name``; unknown names or options raise ``ValueError``."""
    return construct(_attender_class(name), query_dim, key_dim, value_dim, options)


def _attender_class(name: str) -> type[Attender]:
    if name not in ATTENDERS:
        raise ValueError(
            f"unknown attender {name!r}; choose one of {sorted(ATTENDERS)}{did_you_mean(name, ATTENDERS)}"
        )
    return ATTENDERS[name]
