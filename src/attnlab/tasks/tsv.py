"""Reading and writing the machine-tasks TSV format (i-machine-think/machine-tasks).

This is the format of the public data of Dubois et al. (2020, §6.1, footnote 6; Tables 1–2 show
its columns). A file holds one example per line, UTF-8, lines ending in ``\\n`` (a ``\\r``
before it is tolerated on reading), no header. Each line has 2 or 3 columns separated by one
tab character:

1. the source tokens, separated by spaces, e.g. ``000 t1 t2 .``;
2. the target tokens, separated by spaces, *without* ``<eos>`` (it is implicit), e.g.
   ``000 110 100``;
3. optional, the gold target attention: source indices (0-based integers), separated by spaces,
   one per target token followed by one for ``<eos>`` — ``len(target) + 1`` in all, each in
   ``0 … len(source) - 1`` — e.g. ``0 1 2 3``. An empty (all-blank) third column counts as
   absent, so in a 3-column file a row without attention ends in a tab.

**Every line of a file has the same number of columns as its first line** (2 or 3): a line that
lost or gained a tab is an error naming it, never read as something else (a lost tab before the
attention would otherwise turn the attention indices into target tokens). :func:`write_tsv`
writes 3 columns on every line when any example has attention.

Blank lines are allowed only at the end of a file, so example ``i`` (0-based) of
:func:`read_tsv` is on line ``i + 1``. Target columns may not contain the special tokens
``<pad>``, ``<sos>`` or ``<eos>``; source columns may not contain ``<pad>``.

Problems raise :class:`DataFormatError` (a :class:`ValueError`) naming the file, the 1-based
line and what was expected.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from attnlab.io import atomic_path
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.vocab import EOS_TOKEN, PAD_TOKEN, SOS_TOKEN

_RESERVED_IN_TARGET = (PAD_TOKEN, SOS_TOKEN, EOS_TOKEN)
_RESERVED_IN_SOURCE = (PAD_TOKEN,)


class DataFormatError(ValueError):
    """A data file, or an example to be written, does not follow the expected format.

    ``path`` and ``line`` (1-based, or ``None`` when the problem is not with one line) say where.
    """

    def __init__(self, path: str | os.PathLike[str], line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = message
        where = self.path if line is None else f"{self.path} line {line}"
        super().__init__(f"{where}: {message}")


class DataFileNotFoundError(DataFormatError, FileNotFoundError):
    """The data file does not exist (also a :class:`FileNotFoundError`)."""


# --------------------------------------------------------------------------------------------
# Reading.


def read_tsv(path: str | os.PathLike[str]) -> list[Seq2SeqExample]:
    """Read a machine-tasks TSV file (see the module docstring) into examples.

    Raises :class:`DataFormatError` for a missing, empty, undecodable or malformed file.
    """
    lines = read_lines_of_text(path, "a TSV file", "one example per line")
    examples = []
    width = None
    for number, line in enumerate(lines, start=1):
        example, columns = _parse_line(path, number, line)
        if width is None:
            width = columns
        elif columns != width:
            raise DataFormatError(
                path,
                number,
                f"found {columns} tab-separated columns, but line 1 has {width}; every line of a file "
                "must have the same number of columns (source, target[, attention])",
            )
        examples.append(example)
    return examples


def read_lines_of_text(path: str | os.PathLike[str], expected: str, content: str) -> list[str]:
    """The lines of a UTF-8 file whose example ``i`` (0-based) is on line ``i + 1``.

    Blank lines at the end are dropped; a trailing ``\\r`` of each line is kept (for the caller's
    parser). ``expected`` names the kind of file (``"a TSV file"``) and ``content`` what it holds,
    for the errors: :class:`DataFileNotFoundError` for a missing file, :class:`DataFormatError`
    for a directory, an empty file or bytes that are not UTF-8 (naming the line).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataFileNotFoundError(path, None, "no such file") from None
    except IsADirectoryError:
        raise DataFormatError(path, None, f"is a directory, expected {expected}") from None
    return lines_of_bytes(data, path, f"the file is empty; expected {content}")


def lines_of_bytes(data: bytes, where: str | os.PathLike[str], empty: str) -> list[str]:
    """The lines of UTF-8 ``data`` read from ``where`` (a file, or e.g. ``"standard input"``), split
    at ``\\n`` only, blank lines at the end dropped; :class:`DataFormatError` for bytes that are not
    UTF-8 (naming the line) or no lines at all (the message ``empty``)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataFormatError(where, line, f"not valid UTF-8 ({error.reason})") from None
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise DataFormatError(where, None, empty)
    return lines


def _parse_line(path: str | os.PathLike[str], number: int, line: str) -> tuple[Seq2SeqExample, int]:
    """The example on one line and its number of columns."""
    if line.endswith("\r"):
        line = line[:-1]
    if not line.strip():
        raise DataFormatError(path, number, "blank line; blank lines are only allowed at the end of the file")
    columns = line.split("\t")
    if len(columns) not in (2, 3):
        raise DataFormatError(
            path,
            number,
            f"expected 2 or 3 tab-separated columns (source, target[, attention]), found {len(columns)}",
        )
    source = _parse_tokens(path, number, columns[0], "source", _RESERVED_IN_SOURCE)
    target = _parse_tokens(path, number, columns[1], "target", _RESERVED_IN_TARGET)
    attention = None
    if len(columns) == 3 and columns[2].strip():
        attention = _parse_attention(path, number, columns[2], len(source), len(target))
    return Seq2SeqExample(source=source, target=target, attention=attention), len(columns)


def _parse_tokens(
    path: str | os.PathLike[str], number: int, column: str, what: str, reserved: tuple[str, ...]
) -> tuple[str, ...]:
    tokens = tuple(column.split())
    if not tokens:
        raise DataFormatError(path, number, f"empty {what}; expected space-separated tokens")
    for token in tokens:
        if token in reserved:
            detail = " (<eos> is implicit, do not write it)" if token == EOS_TOKEN else ""
            raise DataFormatError(path, number, f"the {what} contains the reserved token {token!r}{detail}")
    return tokens


def _parse_attention(
    path: str | os.PathLike[str], number: int, column: str, n_source: int, n_target: int
) -> tuple[int, ...]:
    fields = column.split()
    try:
        attention = tuple(int(field) for field in fields)
    except ValueError:
        bad = next(field for field in fields if not _is_int(field))
        raise DataFormatError(
            path, number, f"attention index {bad!r} is not an integer; expected source indices"
        ) from None
    if len(attention) != n_target + 1:
        raise DataFormatError(
            path,
            number,
            f"expected {n_target + 1} attention indices (one per target token plus one for "
            f"<eos>, len(target) = {n_target}), found {len(attention)}",
        )
    for index in attention:
        if not 0 <= index < n_source:
            raise DataFormatError(
                path,
                number,
                f"attention index {index} out of range; expected 0..{n_source - 1} "
                f"(the source has {n_source} tokens)",
            )
    return attention


def _is_int(field: str) -> bool:
    try:
        int(field)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Writing.


def write_tsv(path: str | os.PathLike[str], examples: Iterable[Seq2SeqExample]) -> None:
    """Write ``examples`` as a machine-tasks TSV file (see the module docstring), atomically.

    Every line gets 3 columns when any example has attention (an empty third column for those
    without), else 2. All examples are checked first (:class:`DataFormatError` naming the would-be line); the
    text goes to a temporary file beside ``path`` that then replaces ``path``, so readers never
    see a half-written file. Missing parent directories are created.
    """
    examples = list(examples)
    with_attention = any(example.attention is not None for example in examples)
    lines = [
        _format_line(path, number, example, with_attention)
        for number, example in enumerate(examples, start=1)
    ]
    if not lines:
        raise DataFormatError(path, None, "no examples to write; an empty file cannot be read")
    text = "".join(lines)
    with atomic_path(path) as temporary:
        with open(temporary, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)


def _format_line(
    path: str | os.PathLike[str], number: int, example: Seq2SeqExample, with_attention: bool
) -> str:
    columns = [
        format_tokens(path, number, example.source, "source", _RESERVED_IN_SOURCE),
        format_tokens(path, number, example.target, "target", _RESERVED_IN_TARGET),
    ]
    if example.attention is not None:
        # Reuse the reader's checks so that what is written can be read back.
        text = " ".join(str(index) for index in example.attention)
        _parse_attention(path, number, text, len(example.source), len(example.target))
        columns.append(text)
    elif with_attention:
        columns.append("")
    return "\t".join(columns) + "\n"


def format_tokens(
    path: str | os.PathLike[str],
    number: int,
    tokens: tuple[str, ...],
    what: str,
    reserved: tuple[str, ...],
) -> str:
    """``tokens`` joined by spaces, for line ``number`` of the file ``path`` being written.

    Raises :class:`DataFormatError` for no tokens, a token that is empty or holds whitespace (it
    would be read back as other tokens) or one of ``reserved``; ``what`` names the field.
    """
    if not tokens:
        raise DataFormatError(path, number, f"cannot write an empty {what}")
    for token in tokens:
        if not isinstance(token, str) or not token or token.split() != [token]:
            raise DataFormatError(path, number, f"{what} token {token!r} is empty or contains whitespace")
        if token in reserved:
            raise DataFormatError(path, number, f"the {what} contains the reserved token {token!r}")
    return " ".join(tokens)
