"""Helpers of the property-based (hypothesis) tests of the file readers: token strategies, byte
mutations of a valid file, and the one assertion every reader must satisfy on bad input."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from attnlab.errors import USER_ERRORS
from attnlab.tasks.tsv import DataFormatError

_TOKEN_CHARACTERS = st.characters(
    # No whitespace or control characters (str.split() splits on some of them), no surrogates.
    blacklist_categories=("Zs", "Zl", "Zp", "Cc", "Cs"),
)

NOISE_BYTES = st.binary(max_size=200) | st.lists(
    st.sampled_from(
        [
            b"\t",
            b" ",
            b"\n",
            b"\r\n",
            b"\r",
            b"a",
            b"0",
            b"12",
            b"IN:",
            b"OUT:",
            b"<eos>",
            b"<pad>",
            b"XXXXX",
            b"|",
            b"1 ",
            b"21 ",
            b"=",
            b"\xff",
            b"\xc3",
            b"\xc3\xa9",
            b"\xef\xbb\xbf",
            b"\x00",
            b"9" * 4400,
        ]
    ),
    max_size=40,
).map(b"".join)
"""Arbitrary bytes, and byte soups made of the separators and keywords the formats use."""


def tokens(excluded: Sequence[str] = (), max_size: int = 4) -> st.SearchStrategy[str]:
    """One token: 1 to ``max_size`` characters without whitespace, not one of ``excluded``."""
    return st.text(_TOKEN_CHARACTERS, min_size=1, max_size=max_size).filter(
        lambda token: token.split() == [token] and token not in excluded
    )


def write_bytes(folder: Path, data: bytes, name: str) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def replace_line(data: bytes, number: int, new: bytes) -> bytes:
    """``data`` with its 1-based line ``number`` (without the ``\\n``) replaced by ``new``."""
    lines = data.split(b"\n")
    lines[number - 1] = new
    return b"\n".join(lines)


def insert_line(data: bytes, number: int, new: bytes) -> bytes:
    """``data`` with ``new`` inserted as line ``number`` (1-based)."""
    lines = data.split(b"\n")
    lines.insert(number - 1, new)
    return b"\n".join(lines)


def line_of(data: bytes, number: int) -> bytes:
    return data.split(b"\n")[number - 1]


def assert_user_error(read: Callable[[Path], Any], path: Path, line: int | None | type[Any] = Any) -> Any:
    """``read(path)`` raises a :class:`DataFormatError` that names ``path`` (and ``line``, when
    given; ``None`` for a whole-file problem) and nothing else: any other exception fails."""
    with pytest.raises(DataFormatError) as info:
        read(path)
    error = info.value
    assert error.path == str(path)
    where = str(path) if error.line is None else f"{path} line {error.line}"
    assert str(error).startswith(f"{where}: ") and error.reason
    if line is not Any:
        assert error.line == line, str(error)
    return error


def read_or_user_error(read: Callable[[Path], Any], path: Path) -> Any:
    """``read(path)``'s result, or ``None`` after a user error that names ``path``; any other
    exception (IndexError, UnicodeDecodeError, KeyError, a bare ValueError …) fails the test."""
    try:
        return read(path)
    except USER_ERRORS as error:
        assert isinstance(error, DataFormatError), repr(error)
        assert error.path == str(path) and str(error).startswith(str(path)), str(error)
        return None
