"""Argument checks shared by the library's public functions and modules."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence


def check_int(name: str, value: object, *, minimum: int | None = 1, owner: str = "") -> None:
    """Raise a ``ValueError`` naming ``name`` (after ``owner``, if given) unless ``value`` is an
    int of at least ``minimum`` (any int with ``None``). A bool is not taken for an int, nor is a
    float that happens to be whole: a size of ``2.0`` or ``True`` is a mistake somewhere upstream."""
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        prefix = f"{owner}: " if owner else ""
        raise ValueError(f"{prefix}{name} must be an int{bound}, got {value!r}")


NEAR_MISS = 0.75
"""The least ``difflib`` similarity ratio of a near miss: a typo of a word of three letters or more
(``hed``/``heads`` 0.75, ``lenght``/``length`` 0.83, ``reltaive``/``relative`` 0.88), and not most
different words that share a part (``layers``/``stop_layers`` 0.71, ``positional``/``prediction``
0.6, ``given_length``/``max_length`` 0.64); some still pass (``embedding_dim``/``embedding_init``
0.82), so the config loader first names a key of another section by its path."""


def closest_choice(value: object, choices: Iterable[object]) -> str | None:
    """The choice that the string ``value`` nearly spells (the same letters in another case, else
    ``difflib``'s best match with a similarity ratio of at least :data:`NEAR_MISS`), or ``None``."""
    if not isinstance(value, str):
        return None
    names = [choice for choice in choices if isinstance(choice, str)]
    same_but_case = [name for name in names if name.lower() == value.lower()]
    matches = same_but_case or difflib.get_close_matches(value, names, n=1, cutoff=NEAR_MISS)
    return matches[0] if matches else None


def did_you_mean(value: object, choices: Iterable[object]) -> str:
    """``"; did you mean 'x'?"`` when ``value`` nearly spells the choice ``x``
    (:func:`closest_choice`), else ``""``: appended to an error that lists the choices, so a typo
    among forty keys is found at a glance."""
    match = closest_choice(value, choices)
    return f"; did you mean {match!r}?" if match is not None else ""


def did_you_mean_each(values: Iterable[object], choices: Iterable[object]) -> str:
    """:func:`did_you_mean` for several unknown values: ``"; did you mean 'x' for 'y', …?"``."""
    allowed = list(choices)
    suggestions: dict[object, list[str]] = {}
    for value in values:
        match = closest_choice(value, allowed)
        suggestions[value] = [match] if match is not None else []
    return suggestion_hint(suggestions)


def suggestion_hint(suggestions: Mapping[object, Sequence[str]]) -> str:
    """The hint of :func:`did_you_mean_each` for given ``suggestions`` (unknown value → what it
    may have meant, none or several): ``"; did you mean 'x'?"`` (or ``'x' or 'z'``) for one value,
    ``"; did you mean 'x' for 'y', …?"`` for several, ``""`` without any suggestion."""
    named = {value: " or ".join(repr(match) for match in matches) for value, matches in suggestions.items()}
    if len(named) == 1:
        (meant,) = named.values()
        return f"; did you mean {meant}?" if meant else ""
    pairs = [f"{meant} for {value!r}" for value, meant in named.items() if meant]
    return f"; did you mean {', '.join(pairs)}?" if pairs else ""


def check_choice(name: str, value: object, choices: Iterable[object], *, owner: str = "") -> None:
    """Raise a ``ValueError`` naming ``name`` (after ``owner``, if given) unless ``value`` is one of
    ``choices``, listing them in their order and pointing out a near miss (:func:`did_you_mean`)."""
    allowed = list(choices)
    if value not in allowed:
        prefix = f"{owner}: " if owner else ""
        raise ValueError(
            f"{prefix}{name} must be one of {allowed}, got {value!r}{did_you_mean(value, allowed)}"
        )
