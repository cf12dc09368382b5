"""The Children's Book Test (Hill et al. 2016) cloze format, as used by Daniluk et al. (2017, Fig. 2d).

A file (``cbtest_{NE,CN,V,P}_{train,valid_2000ex,test_2500ex}.txt``) holds questions separated by
blank lines. A question is 21 numbered lines, UTF-8, tokens separated by spaces::

    1 First context sentence .
    …
    20 Twentieth context sentence .
    21 The query with XXXXX in place of a word .<TAB>answer<TAB><TAB>cand1|cand2|…|cand10

Lines ``1 … 20`` are the context; line 21 is the query, the answer and the candidates (separated
by ``|``, the answer among them), in tab-separated fields (empty fields are ignored). The word
class of a file (named entities ``NE``, common nouns ``CN``, verbs ``V``, prepositions ``P``)
comes from its name. Problems raise :class:`~attnlab.tasks.tsv.DataFormatError` naming the file
and line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attnlab.tasks.corpus import decoded_lines
from attnlab.tasks.tsv import DataFormatError

BLANK = "XXXXX"
CONTEXT_SENTENCES = 20
WORD_CLASSES: tuple[str, ...] = ("NE", "CN", "V", "P")
_CLASS_IN_NAME = re.compile(r"cbtest_(NE|CN|V|P)_")
_NUMBERED = re.compile(r"^([0-9]+) (.*)$")


@dataclass(frozen=True)
class ClozeQuestion:
    """One CBT question: context sentences, the query (with :data:`BLANK`), answer, candidates."""

    context: tuple[tuple[str, ...], ...]
    query: tuple[str, ...]
    answer: str
    candidates: tuple[str, ...]
    line: int
    """1-based line of the query in its file."""

    def filled(self, candidate: str) -> list[str]:
        """The query with the blank replaced by ``candidate``."""
        return [candidate if token == BLANK else token for token in self.query]

    @property
    def answer_index(self) -> int:
        return self.candidates.index(self.answer)


def word_class(path: str | os.PathLike[str]) -> str | None:
    """``NE``, ``CN``, ``V`` or ``P`` from a file name such as ``cbtest_NE_test_2500ex.txt``."""
    match = _CLASS_IN_NAME.search(Path(path).name)
    return match.group(1) if match else None


def read_cbt(
    path: str | os.PathLike[str], *, context_sentences: int = CONTEXT_SENTENCES
) -> list[ClozeQuestion]:
    """Read every question of a CBT file (see the module docstring)."""
    path = Path(path)
    questions = [_parse_block(path, block, context_sentences) for block in _blocks(path)]
    if not questions:
        raise DataFormatError(path, None, "no questions: the file is empty")
    return questions


def _blocks(path: Path) -> Iterator[list[tuple[int, str]]]:
    block: list[tuple[int, str]] = []
    for number, raw in enumerate(decoded_lines(path), start=1):
        line = raw.rstrip("\r\n")
        if line.strip():
            block.append((number, line))
        elif block:
            yield block
            block = []
    if block:
        yield block


def _parse_block(path: Path, block: list[tuple[int, str]], context_sentences: int) -> ClozeQuestion:
    expected_lines = context_sentences + 1
    context: list[tuple[str, ...]] = []
    for position, (number, line) in enumerate(block, start=1):
        match = _NUMBERED.match(line)
        # Compared as text: int() of a very long number is a ValueError of its own.
        if match is None or match.group(1) != str(position):
            raise DataFormatError(
                path,
                number,
                f"expected line {position} of a question to start with '{position} ', got {line[:40]!r}",
            )
        is_query = "\t" in match.group(2)
        if is_query != (position == expected_lines):
            raise DataFormatError(
                path,
                number,
                f"a question is {context_sentences} context sentences and a query line "
                f"('{expected_lines} query<TAB>answer<TAB><TAB>candidates'); "
                + ("found the query at line " if is_query else "found no query at line ")
                + f"{position} of the block",
            )
        if is_query:
            return _parse_query(path, number, match.group(2), context)
        context.append(tuple(match.group(2).split()))
    number = block[-1][0]
    raise DataFormatError(
        path,
        number,
        f"question block ends after {len(block)} lines; expected {expected_lines} "
        f"({context_sentences} context sentences and the query line)",
    )


def _parse_query(path: Path, number: int, text: str, context: list[tuple[str, ...]]) -> ClozeQuestion:
    fields = [field.strip() for field in text.split("\t") if field.strip()]
    if len(fields) != 3:
        raise DataFormatError(
            path,
            number,
            f"the query line needs 3 tab-separated fields (query, answer, candidates), found {len(fields)}",
        )
    query = tuple(fields[0].split())
    answer = fields[1]
    candidates = tuple(candidate.strip() for candidate in fields[2].split("|"))
    if query.count(BLANK) != 1:
        raise DataFormatError(
            path, number, f"the query must contain {BLANK} once, found {query.count(BLANK)}"
        )
    if len(candidates) < 2 or any(not candidate or " " in candidate for candidate in candidates):
        raise DataFormatError(
            path, number, f"expected '|'-separated single-word candidates, got {fields[2]!r}"
        )
    if len(set(candidates)) != len(candidates):
        raise DataFormatError(path, number, f"duplicate candidates in {fields[2]!r}")
    if answer not in candidates:
        raise DataFormatError(
            path, number, f"the answer {answer!r} is not among the candidates {list(candidates)}"
        )
    return ClozeQuestion(tuple(context), query, answer, candidates, number)


def write_cbt(path: str | os.PathLike[str], questions: list[ClozeQuestion]) -> None:
    """Write questions in the CBT format (for tests and small fixtures), atomically."""
    from attnlab.io import atomic_write_text

    blocks = []
    for question in questions:
        lines = [f"{i} {' '.join(sentence)}" for i, sentence in enumerate(question.context, start=1)]
        lines.append(
            f"{len(question.context) + 1} {' '.join(question.query)}\t{question.answer}\t\t"
            + "|".join(question.candidates)
        )
        blocks.append("\n".join(lines) + "\n")
    atomic_write_text(path, "\n".join(blocks))
