"""SCAN (Lake & Baroni 2018): the grammar, its interpretation, the public file format and the splits.

**Grammar** (Lake & Baroni 2018, Figure 6 / appendix; Russin et al. 2019, §3)::

    C → S and S | S after S | S
    S → V twice | V thrice | V
    V → D[1] opposite D[2] | D[1] around D[2] | D | U
    D → U left | U right | turn left | turn right
    U → walk | look | run | jump

``opposite`` and ``around`` take the verb of ``D[1]`` and the direction of ``D[2]``, so
``V`` covers ``{walk, look, run, jump, turn} × {opposite, around} × {left, right}`` (20 phrases),
``D`` (10) and ``U`` (4): 34 verb phrases, 102 sentences ``S`` and ``102 + 2·102² = 20,910``
commands — exactly the rows of the public ``tasks.txt``.

**Interpretation** (actions ``I_WALK``, ``I_LOOK``, ``I_RUN``, ``I_JUMP``, ``I_TURN_LEFT``,
``I_TURN_RIGHT``)::

    [[walk]] = I_WALK  (look, run, jump alike)      [[turn left]] = I_TURN_LEFT
    [[u left]] = I_TURN_LEFT [[u]]                  [[turn opposite left]] = I_TURN_LEFT I_TURN_LEFT
    [[u opposite left]] = [[turn opposite left]] [[u]]
    [[turn around left]] = I_TURN_LEFT × 4          [[u around left]] = (I_TURN_LEFT [[u]]) × 4
    [[x twice]] = [[x]] [[x]]                       [[x thrice]] = [[x]] [[x]] [[x]]
    [[x1 and x2]] = [[x1]] [[x2]]                   [[x1 after x2]] = [[x2]] [[x1]]

(``right`` alike.) :func:`generate_scan` enumerates the grammar; :func:`interpret` parses one
command and returns its actions (a ``ValueError`` for anything outside the grammar).

**File format** (the public SCAN repository, and the English–French set of Lake & Baroni that
Russin et al. also use): one example a line, ``IN: <command words> OUT: <output tokens>``, UTF-8,
words separated by spaces. :func:`read_scan_file` reads it; blank lines are allowed only at the end
of a file, so example ``i`` (0-based) is on line ``i + 1`` (errors at evaluation name that line).
Problems raise :class:`~attnlab.tasks.tsv.DataFormatError` naming the file and the line.

**Splits.** :func:`load_standard_split` reads the four public splits (simple, length, add-primitive
jump, add-primitive turn left); :func:`random_split`, :func:`length_split`,
:func:`primitive_split` and :func:`template_split` build them — and new ones — from the generator.
:func:`generate_standard_split` rebuilds the four public splits from the generator (the length and
add-primitive ones exactly as multisets of examples; the simple split is a random 80/20 split,
not the public one).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attnlab.checks import did_you_mean
from attnlab.io import atomic_path
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.splits import random_hold_out
from attnlab.tasks.tsv import DataFileNotFoundError, DataFormatError, format_tokens, read_lines_of_text
from attnlab.tasks.vocab import EOS_TOKEN, PAD_TOKEN, SOS_TOKEN

__all__ = [
    "ACTIONS",
    "MARKERS",
    "SCAN_SIZE",
    "STANDARD_SPLITS",
    "ScanSplit",
    "generate_scan",
    "generate_standard_split",
    "interpret",
    "length_split",
    "load_standard_split",
    "marked_actions",
    "primitive_split",
    "random_split",
    "read_scan_file",
    "sentence_actions",
    "strip_markers",
    "template_split",
    "write_scan_file",
]

_KEYWORDS = ("IN:", "OUT:")
"""The words that mark a line's fields: never a token of a command or an output."""
_RESERVED_IN_OUTPUT = (PAD_TOKEN, SOS_TOKEN, EOS_TOKEN)

PRIMITIVES: dict[str, str] = {"walk": "I_WALK", "look": "I_LOOK", "run": "I_RUN", "jump": "I_JUMP"}
TURNS: dict[str, str] = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}
REPETITIONS: dict[str, int] = {"twice": 2, "thrice": 3}
CONJUNCTIONS: tuple[str, ...] = ("and", "after")
ACTIONS: tuple[str, ...] = (*PRIMITIVES.values(), *TURNS.values())
MARKERS: dict[str, str] = {"repetition": "<rep>", "sentence": "<sep>"}
"""Output markers (:func:`marked_actions`) by kind → the token written into the output."""
SCAN_SIZE = 20_910
"""Number of commands the grammar generates (the rows of the public ``tasks.txt``)."""

#: Public split name → (train file, test file) relative to the SCAN repository root.
STANDARD_SPLITS: dict[str, tuple[str, str]] = {
    "simple": ("simple_split/tasks_train_simple.txt", "simple_split/tasks_test_simple.txt"),
    "length": ("length_split/tasks_train_length.txt", "length_split/tasks_test_length.txt"),
    "addprim_jump": (
        "add_prim_split/tasks_train_addprim_jump.txt",
        "add_prim_split/tasks_test_addprim_jump.txt",
    ),
    "addprim_turn_left": (
        "add_prim_split/tasks_train_addprim_turn_left.txt",
        "add_prim_split/tasks_test_addprim_turn_left.txt",
    ),
}

LENGTH_SPLIT_MAX_TRAIN_ACTIONS = 22
"""Lake & Baroni's length split trains on outputs of at most 22 actions, tests on longer ones."""
PRIMITIVE_OVERSAMPLE_FRACTION = 0.1
"""In the public add-primitive training files the bare primitive command is 10% of the rows."""

Phrase = tuple[tuple[str, ...], tuple[str, ...]]
"""(command words, actions)."""


# ------------------------------------------------------------------------------- grammar


def _verb_phrases() -> list[Phrase]:
    """The 34 phrases of ``V`` with their meanings: ``U``, ``D``, ``D opposite D``, ``D around D``."""
    phrases: list[Phrase] = [((verb,), (action,)) for verb, action in PRIMITIVES.items()]
    for verb in (*PRIMITIVES, "turn"):
        act = () if verb == "turn" else (PRIMITIVES[verb],)
        for direction, turn in TURNS.items():
            phrases.append(((verb, direction), (turn, *act)))
            phrases.append(((verb, "opposite", direction), (turn, turn, *act)))
            phrases.append(((verb, "around", direction), (turn, *act) * 4))
    return phrases


def _sentences() -> list[Phrase]:
    """The 102 phrases of ``S``: every ``V``, ``V twice`` and ``V thrice``."""
    sentences: list[Phrase] = []
    for words, actions in _verb_phrases():
        sentences.append((words, actions))
        for repetition, times in REPETITIONS.items():
            sentences.append(((*words, repetition), actions * times))
    return sentences


_VERB_MEANINGS: dict[tuple[str, ...], tuple[str, ...]] = dict(_verb_phrases())


def generate_scan() -> list[Seq2SeqExample]:
    """All 20,910 SCAN commands with their actions, in a fixed order (sentences, ``and``, ``after``)."""
    sentences = _sentences()
    examples = [Seq2SeqExample(words, actions) for words, actions in sentences]
    for conjunction in CONJUNCTIONS:
        for first_words, first_actions in sentences:
            for second_words, second_actions in sentences:
                actions = _conjoin(conjunction, first_actions, second_actions)
                examples.append(Seq2SeqExample((*first_words, conjunction, *second_words), actions))
    return examples


def _conjoin(
    conjunction: str, first: tuple[str, ...], second: tuple[str, ...], separator: tuple[str, ...] = ()
) -> tuple[str, ...]:
    return first + separator + second if conjunction == "and" else second + separator + first


def interpret(command: str | Sequence[str]) -> tuple[str, ...]:
    """The actions of one SCAN command, e.g. ``interpret("jump twice")`` → ``("I_JUMP", "I_JUMP")``.

    Raises ``ValueError`` naming the command when it is not in the grammar.
    """
    return _actions(command)


def sentence_actions(command: str | Sequence[str]) -> tuple[int, ...]:
    """How many actions each sentence ``S`` of a command has, in the command's word order (one
    number, or two for ``S and S`` / ``S after S``): ``sentence_actions("jump around left thrice
    and walk")`` → ``(24, 1)``.

    On Lake & Baroni's length split (training outputs of at most 22 actions) 3,144 of the 3,920
    test commands have a sentence longer than every training output, all of them ``U around D
    thrice`` (24 actions); at every cut-off from 24 up, none has. So at 22 a model must lengthen a
    sentence itself, not only join known ones. Raises ``ValueError`` as :func:`interpret`.
    """
    return tuple(len(actions) for actions in _interpreted_sentences(command)[1])


def marked_actions(command: str | Sequence[str], kinds: Sequence[str]) -> tuple[str, ...]:
    """The actions of one SCAN command with the grammar's structure written into them as marker
    tokens (:data:`MARKERS`), for training with the structure as extra supervision:

    * ``"repetition"``: ``<rep>`` between the copies of a ``twice`` / ``thrice`` sentence —
      ``"jump around left thrice"`` → 8 actions ``<rep>`` 8 actions ``<rep>`` 8 actions;
    * ``"sentence"``: ``<sep>`` between the two sentences of ``S and S`` / ``S after S``, in the
      output's order.

    Why (issue 28): on Lake & Baroni's length split every test command with a sentence longer than
    the training outputs is ``U around D thrice`` (24 actions, :func:`sentence_actions`), a count
    no model here learns (docs/results.md, sessions 34, 50–51). With repetition markers that
    sentence is three 8-action passes, a count of passes (3) and a count within a pass (8) that
    training shows apart ("U around D twice", "turn around D thrice"), so each count a decoder
    needs stays within the trained ones. This changes the task: the markers are supervision of the
    command's parse that the standard split does not give, and results with them are reported as
    such. Measured (docs/results.md, session 52): with ``repetition`` markers the recurrent Shift
    Attender writes the third pass in every seed (72.2 ± 7.7% on the length split, 5 seeds; 21.5 ±
    21.5% without them), while the Transformer still ends the sentence after two passes. Stripping
    the markers gives :func:`interpret`'s actions. Raises ``ValueError`` as :func:`interpret`, or
    for a kind not in :data:`MARKERS`.
    """
    unknown = [kind for kind in kinds if kind not in MARKERS]
    if unknown:
        raise ValueError(f"output marker kinds must be among {list(MARKERS)}, got {unknown}")
    repetition, sentence = ((MARKERS[kind],) if kind in kinds else () for kind in ("repetition", "sentence"))
    return _actions(command, repetition, sentence)


def strip_markers(tokens: Sequence[str]) -> tuple[str, ...]:
    """``tokens`` without the marker tokens of :func:`marked_actions`."""
    markers = set(MARKERS.values())
    return tuple(token for token in tokens if token not in markers)


def _actions(
    command: str | Sequence[str], repetition: tuple[str, ...] = (), sentence: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """A command's actions, ``repetition`` between the copies of a repeated sentence and ``sentence``
    between the two sentences of a conjunction (both empty: :func:`interpret`)."""
    words, sentences = _interpreted_sentences(command, repetition)
    if len(sentences) == 1:
        return sentences[0]
    conjunction = next(word for word in words if word in CONJUNCTIONS)
    first, second = sentences
    return _conjoin(conjunction, first, second, sentence)


def _interpreted_sentences(
    command: str | Sequence[str], repetition: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """A command's words and the actions of each of its sentences (either side of its one ``and`` /
    ``after``, if it has one; ``repetition`` between the copies of a repeated one); a
    ``ValueError`` naming the command when it is not in the grammar."""
    words = tuple(command.split()) if isinstance(command, str) else tuple(command)
    conjunctions = [i for i, word in enumerate(words) if word in CONJUNCTIONS]
    try:
        if len(conjunctions) > 1:
            raise ValueError("a command has at most one 'and' or 'after'")
        sentences = [words[: conjunctions[0]], words[conjunctions[0] + 1 :]] if conjunctions else [words]
        return words, [_interpret_sentence(sentence, repetition) for sentence in sentences]
    except ValueError as error:
        raise ValueError(f"not a SCAN command: {' '.join(words)!r}: {error}") from None


def _interpret_sentence(words: tuple[str, ...], repetition: tuple[str, ...] = ()) -> tuple[str, ...]:
    times = 1
    if words and words[-1] in REPETITIONS:
        words, times = words[:-1], REPETITIONS[words[-1]]
    if words not in _VERB_MEANINGS:
        raise ValueError(f"{' '.join(words)!r} is not a verb phrase (e.g. 'jump', 'walk opposite left')")
    meaning = _VERB_MEANINGS[words]
    return meaning + (*repetition, *meaning) * (times - 1)


# --------------------------------------------------------------------------- file format


def read_scan_file(path: str | os.PathLike[str]) -> list[Seq2SeqExample]:
    """Read a file of ``IN: <command> OUT: <output>`` lines (see the module docstring).

    Raises :class:`~attnlab.tasks.tsv.DataFormatError` naming the file and line for a missing,
    empty or undecodable file, a line without ``IN:`` or ``OUT:``, an empty command or output,
    a blank line before the end, or a reserved token (``<pad>``, ``<sos>``, ``<eos>``).
    """
    path = Path(path)
    lines = read_lines_of_text(path, "an 'IN: … OUT: …' file", "lines 'IN: <command> OUT: <output>'")
    return [_parse_line(path, number, line) for number, line in enumerate(lines, start=1)]


def _parse_line(path: Path, number: int, line: str) -> Seq2SeqExample:
    line = line.rstrip("\r")
    if not line.strip():
        raise DataFormatError(path, number, "blank line; blank lines are only allowed at the end of the file")
    words = line.split()
    expected = "expected 'IN: <command> OUT: <output>'"
    if words[0] != "IN:":
        raise DataFormatError(path, number, f"{expected}; the line does not start with 'IN:'")
    if words.count("OUT:") != 1:
        found = "no 'OUT:'" if "OUT:" not in words else "more than one 'OUT:'"
        raise DataFormatError(path, number, f"{expected}; found {found}")
    if words.count("IN:") != 1:
        raise DataFormatError(path, number, f"{expected}; found more than one 'IN:'")
    split = words.index("OUT:")
    source, target = tuple(words[1:split]), tuple(words[split + 1 :])
    if not source:
        raise DataFormatError(path, number, "empty command after 'IN:'")
    if not target:
        raise DataFormatError(path, number, "empty output after 'OUT:'")
    _check_reserved(path, number, source, "command", (PAD_TOKEN,))
    _check_reserved(path, number, target, "output", _RESERVED_IN_OUTPUT)
    return Seq2SeqExample(source, target)


def _check_reserved(
    path: Path | str, number: int, tokens: tuple[str, ...], what: str, reserved: tuple[str, ...]
) -> None:
    for token in tokens:
        if token in reserved:
            raise DataFormatError(path, number, f"the {what} contains the reserved token {token!r}")


def write_scan_file(path: str | os.PathLike[str], examples: Sequence[Seq2SeqExample]) -> None:
    """Write ``examples`` as ``IN: … OUT: …`` lines, atomically (readable by :func:`read_scan_file`).

    Raises :class:`~attnlab.tasks.tsv.DataFormatError` naming the would-be line, before anything is
    written, for an empty command or output, a token that is empty or holds whitespace, ``IN:`` or
    ``OUT:`` as a token, or a reserved token.
    """
    if not examples:
        raise DataFormatError(path, None, "no examples to write; an empty file cannot be read")
    lines = []
    for number, example in enumerate(examples, start=1):
        source = format_tokens(path, number, example.source, "command", (PAD_TOKEN, *_KEYWORDS))
        target = format_tokens(path, number, example.target, "output", (*_RESERVED_IN_OUTPUT, *_KEYWORDS))
        lines.append(f"IN: {source} OUT: {target}\n")
    with atomic_path(path) as temporary:
        temporary.write_text("".join(lines), encoding="utf-8")


# -------------------------------------------------------------------------------- splits


@dataclass(frozen=True)
class ScanSplit:
    """A train / test split of SCAN examples (the validation set is cut from ``train`` later)."""

    train: list[Seq2SeqExample]
    test: list[Seq2SeqExample]


def load_standard_split(name: str, root: str | os.PathLike[str]) -> ScanSplit:
    """Read the public split ``name`` (see :func:`public_split_files`) from a SCAN checkout at ``root``."""
    train_file, test_file = public_split_files(name, root)
    return ScanSplit(read_scan_file(train_file), read_scan_file(test_file))


def public_split_files(name: str, root: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The train and test files of the public split ``name`` in a checkout of the SCAN repository.

    Every split of the repository is a pair ``<folder>/tasks_train_<name>.txt`` and
    ``<folder>/tasks_test_<name>.txt``, so any such ``name`` is found, in any folder below
    ``root``: the four of :data:`STANDARD_SPLITS`, and e.g. ``template_around_right`` (Loula et al.
    2018, ``template_split/``), ``filler_num1`` (``filler_split/``), ``simple_p16``
    (``simple_split/size_variations/``) or ``addprim_complex_jump_num8_rep1``
    (``add_prim_split/with_additional_examples/``). A missing or ambiguous split is a
    :class:`DataFileNotFoundError` that lists the splits found under ``root``.
    """
    folder = Path(root)
    if not folder.is_dir():
        raise DataFileNotFoundError(
            folder, None, "no such folder (expected a checkout of the SCAN repository)"
        )
    found = {part: sorted(folder.rglob(f"tasks_{part}_{name}.txt")) for part in ("train", "test")}
    for part, paths in found.items():
        if len(paths) != 1:
            problem = "no file" if not paths else f"{len(paths)} files ({', '.join(map(str, paths))})"
            raise DataFileNotFoundError(
                folder,
                None,
                f"SCAN split {name!r}: {problem} named tasks_{part}_{name}.txt below this folder; "
                f"the splits here are: {', '.join(public_split_names(folder)) or 'none'}",
            )
    return found["train"][0], found["test"][0]


def public_split_names(root: str | os.PathLike[str]) -> list[str]:
    """The names of the splits below ``root`` that have both a train and a test file."""

    def names(part: str) -> set[str]:
        prefix = f"tasks_{part}_"
        return {path.name[len(prefix) : -len(".txt")] for path in Path(root).rglob(f"{prefix}*.txt")}

    return sorted(names("train") & names("test"))


def generate_standard_split(name: str, *, seed: int = 0) -> ScanSplit:
    """Build the public split ``name`` from the generator (``seed`` only matters for ``simple``)."""
    examples = generate_scan()
    if name == "simple":
        return random_split(examples, test_fraction=0.2, seed=seed)
    if name == "length":
        return length_split(examples)
    if name == "addprim_jump":
        return primitive_split(examples, "jump")
    if name == "addprim_turn_left":
        return primitive_split(examples, "turn left")
    raise ValueError(
        f"unknown SCAN split {name!r}; the public splits are {sorted(STANDARD_SPLITS)}"
        f"{did_you_mean(name, STANDARD_SPLITS)}"
    )


def random_split(examples: Sequence[Seq2SeqExample], *, test_fraction: float, seed: int) -> ScanSplit:
    """A random split (the "simple" split is 80/20): ``test_fraction`` of the examples go to test."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    train, test = random_hold_out(examples, round(test_fraction * len(examples)), seed)
    return _checked_split(train, test, f"random split with test_fraction={test_fraction}")


def length_split(
    examples: Sequence[Seq2SeqExample], *, max_train_actions: int = LENGTH_SPLIT_MAX_TRAIN_ACTIONS
) -> ScanSplit:
    """Train on outputs of at most ``max_train_actions`` actions, test on longer ones."""
    return _checked_split(
        [ex for ex in examples if len(ex.target) <= max_train_actions],
        [ex for ex in examples if len(ex.target) > max_train_actions],
        f"length split with max_train_actions={max_train_actions}",
    )


def primitive_split(
    examples: Sequence[Seq2SeqExample],
    primitive: str,
    *,
    oversample_fraction: float = PRIMITIVE_OVERSAMPLE_FRACTION,
) -> ScanSplit:
    """The add-primitive split: ``primitive`` (e.g. ``"jump"``, ``"turn left"``) is seen only alone.

    Test: every command containing the phrase ``primitive`` except the bare command. Train: the
    other commands plus the bare command, repeated so that it makes ``oversample_fraction`` of the
    training rows (as in the public files: 1,467 × ``jump`` among 14,670 rows); ``0`` keeps it once.
    """
    if not 0 <= oversample_fraction < 1:
        raise ValueError(f"oversample_fraction must be in [0, 1), got {oversample_fraction}")
    phrase = tuple(primitive.split())
    bare = [ex for ex in examples if ex.source == phrase]
    if not bare:
        raise ValueError(f"primitive {primitive!r} is not a command of its own in these examples")
    rest = [ex for ex in examples if ex.source != phrase]
    test = [ex for ex in rest if _contains(ex.source, phrase)]
    others = [ex for ex in rest if not _contains(ex.source, phrase)]
    copies = max(1, round(oversample_fraction * len(others) / (1 - oversample_fraction)))
    train = others + [bare[0]] * copies
    return _checked_split(train, test, f"primitive split for {primitive!r}")


def template_split(examples: Sequence[Seq2SeqExample], template: str) -> ScanSplit:
    """Hold out every command containing ``template``, a word pattern where ``*`` matches one word.

    E.g. ``"jump around right"`` (Loula et al. 2018) or ``"* opposite right"``.
    """
    pattern = tuple(template.split())
    if not pattern:
        raise ValueError("the template is empty; give words such as 'jump around right'")
    test = [ex for ex in examples if _contains(ex.source, pattern)]
    train = [ex for ex in examples if not _contains(ex.source, pattern)]
    return _checked_split(train, test, f"template split for {template!r}")


def _contains(words: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    """Whether ``pattern`` (``*`` = any word) occurs as contiguous words of ``words``."""
    width = len(pattern)
    return any(
        all(p == "*" or p == w for p, w in zip(pattern, words[start : start + width]))
        for start in range(len(words) - width + 1)
    )


def _checked_split(train: list[Seq2SeqExample], test: list[Seq2SeqExample], what: str) -> ScanSplit:
    if not train or not test:
        empty = "training" if not train else "test"
        raise ValueError(f"the {what} leaves the {empty} set empty")
    return ScanSplit(train, test)
