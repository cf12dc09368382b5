"""The SCAN experiment's data: its ``data:`` config, the splits it reads, their vocabularies and encoding.

:class:`ScanDataConfig` chooses a public SCAN split read from its files (``simple``, ``length``,
``addprim_jump``, ``addprim_turn_left``, …), the same split built by the generator
(``generate: true``), a custom generated split (``primitive``, ``template``, ``random``,
``length`` with ``max_train_actions``), or any ``IN: … OUT: …`` files (``split: files``, e.g. the
English–French set); the grammar, the file format and the splits themselves are
:mod:`attnlab.tasks.scan`. :func:`load_splits` gives ``train``, ``validation`` and the test sets:
following Bastings et al. (2018) and Russin et al. (2019), 20% of the training set is held out
(``validation_fraction``, seeded by ``seed``) unless a ``validation_file`` is given.
:func:`build_vocabularies` makes the source and target vocabularies of the training examples and
:func:`encode_split` encodes a split with them: a word outside them is an error naming the file and
line, or, with ``unknown_words: unk``, ``<unk>`` (counted).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from attnlab.config import ConfigError
from attnlab.tasks import scan
from attnlab.tasks.batching import EncodedDataset, encode_examples
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.splits import random_hold_out
from attnlab.tasks.tsv import DataFormatError
from attnlab.tasks.vocab import EOS_TOKEN, PAD_TOKEN, SOS_TOKEN, Vocabulary

UNK_TOKEN = "<unk>"
STANDARD_TEST_SET = "test"
GENERATED_SPLITS = ("primitive", "template", "random")


@dataclass
class ScanDataConfig:
    """Which split, and how the validation set is held out.

    ``split``: a public split read from the SCAN checkout at ``root``: any ``name`` with files
    ``tasks_train_<name>.txt`` and ``tasks_test_<name>.txt`` in a folder below it (``simple``,
    ``length``, ``addprim_jump``, ``addprim_turn_left``, ``template_around_right``,
    ``filler_num1``, …; see :func:`attnlab.tasks.scan.public_split_files`); with ``generate``, one
    of the first four built by the generator instead; a generated custom split (``primitive`` — holds out
    ``primitive`` as in the add-primitive splits; ``template`` — holds out every command matching
    ``template``, ``*`` = any word; ``random`` — ``test_fraction`` at random); or ``files``
    (``train_file``, ``test_files`` name → path, optional ``validation_file``).

    ``generate: true`` with ``split: length`` and ``max_train_actions: N`` gives the length split
    cut at N actions (Newman et al. 2020 use N in 22–40; Lake & Baroni's public split is N = 22).
    An option of a generated split (``primitive``, ``oversample_fraction``, ``template``,
    ``test_fraction``, ``max_train_actions``) set for a split that does not use it is an error.
    """

    split: str = "addprim_jump"
    root: str = "../shared/data/scan"
    generate: bool = False
    primitive: str = "jump"
    template: str = "jump around right"
    test_fraction: float = 0.2
    max_train_actions: int = scan.LENGTH_SPLIT_MAX_TRAIN_ACTIONS
    oversample_fraction: float = scan.PRIMITIVE_OVERSAMPLE_FRACTION
    train_file: str | None = None
    validation_file: str | None = None
    test_files: dict[str, str] = field(default_factory=dict)
    validation_fraction: float = 0.2
    seed: int = 0
    unknown_words: Literal["error", "unk"] = "error"
    train_limit: int | None = None
    """Keep a random subset of this many training examples (quick runs); ``null`` keeps all."""
    test_limit: int | None = None
    """Keep a random subset of this many examples of the validation set and of each test set."""
    output_markers: list[str] = field(default_factory=list)
    """Write the grammar's structure into every split's outputs as marker tokens
    (:func:`attnlab.tasks.scan.marked_actions`): ``repetition`` (``<rep>`` between the copies of a
    ``twice`` / ``thrice`` sentence) and / or ``sentence`` (``<sep>`` between the two sentences of a
    command). Extra supervision the standard splits do not give; exact match (``seq_acc``) is then
    scored with the markers stripped from the output, against the split's own outputs. Every
    command must be in the SCAN grammar and its output must be the grammar's (an error names the
    file and line otherwise). Default ``[]``: the outputs as they are."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_]+", self.split):
            raise ValueError(
                f"split must be a public split name (letters, digits, _; e.g. addprim_jump, "
                f"template_around_right), one of {list(GENERATED_SPLITS)} or 'files', got {self.split!r}"
            )
        if self.generate and self.split not in scan.STANDARD_SPLITS:
            raise ValueError(
                f"generate: true builds the splits {list(scan.STANDARD_SPLITS)} only, not {self.split!r}"
            )
        self._check_split_options()
        if self.split == "files" and (self.train_file is None or not self.test_files):
            raise ValueError("split 'files' needs train_file and test_files (name: path)")
        if self.split != "files" and (self.train_file or self.test_files or self.validation_file):
            raise ValueError("train_file / validation_file / test_files need split: files")
        if not 0 < self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in (0, 1), got {self.validation_fraction}")
        if not isinstance(self.output_markers, list) or any(
            kind not in scan.MARKERS for kind in self.output_markers
        ):
            kinds, found = list(scan.MARKERS), self.output_markers
            raise ValueError(f"output_markers must be a list of kinds among {kinds}, got {found!r}")
        if len(set(self.output_markers)) != len(self.output_markers):
            raise ValueError(f"output_markers names a kind twice: {self.output_markers}")
        for name in ("train_limit", "test_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or null, got {value}")

    def _check_split_options(self) -> None:
        """An option of one generated split set for another would be silently ignored: refuse it."""
        defaults = ScanDataConfig.__dataclass_fields__
        generated = "generated " if self.generate or self.split in GENERATED_SPLITS else ""
        length_split = (
            "the generated length split (split: length, generate: true; the public length_split "
            "files are cut at 22 actions)"
        )
        # option -> (whether this split uses it, which splits do)
        options = {
            "primitive": (self.split == "primitive", "split: primitive"),
            "oversample_fraction": (self.split == "primitive", "split: primitive"),
            "template": (self.split == "template", "split: template"),
            "test_fraction": (
                self.split == "random" or (self.split == "simple" and self.generate),
                "split: random (or simple with generate: true)",
            ),
            "max_train_actions": (self.split == "length" and self.generate, length_split),
        }
        for name, (used, where) in options.items():
            if not used and getattr(self, name) != defaults[name].default:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} applies to {where} only; the "
                    f"{generated}split {self.split!r} would ignore it"
                )


@dataclass
class Split:
    """Examples and where they come from (for error messages: ``f"{origin} {item} {i + 1}"``)."""

    examples: list[Seq2SeqExample]
    origin: str
    item: str = "example"


def load_splits(data: ScanDataConfig) -> dict[str, Split]:
    """``train``, ``validation`` and the test sets (see :func:`test_set_names`)."""
    train, tests = _train_and_tests(data)
    if data.validation_file is not None:
        validation = Split(scan.read_scan_file(data.validation_file), data.validation_file, "line")
    else:
        kept, held = _hold_out(train.examples, data.validation_fraction, data.seed)
        validation = Split(held, f"{train.origin} (held-out validation)")
        train = Split(kept, f"{train.origin} (training part)")
    if data.train_limit is not None:
        train = Split(_subset(train.examples, data.train_limit, data.seed), train.origin)
    if data.test_limit is not None:
        limit = data.test_limit
        validation = Split(_subset(validation.examples, limit, data.seed), validation.origin)
        tests = {name: Split(_subset(s.examples, limit, data.seed), s.origin) for name, s in tests.items()}
    splits = {"train": train, "validation": validation, **tests}
    if data.output_markers:
        splits = {name: _marked(split, data.output_markers) for name, split in splits.items()}
    return splits


def _marked(split: Split, kinds: Sequence[str]) -> Split:
    """``split`` with the grammar's markers in its outputs (:func:`attnlab.tasks.scan.marked_actions`);
    a :class:`DataFormatError` naming the example when its command is not in the grammar or its
    output is not the command's."""
    marked = []
    for i, example in enumerate(split.examples):
        line = i + 1 if split.item == "line" else None
        which = "" if line is not None else f"{split.item} {i + 1}: "
        try:
            target = scan.marked_actions(example.source, kinds)
        except ValueError as error:
            raise DataFormatError(
                split.origin, line, f"{which}data.output_markers needs SCAN commands: {error}"
            ) from None
        if scan.strip_markers(target) != example.target:
            raise DataFormatError(
                split.origin,
                line,
                f"{which}data.output_markers needs the grammar's outputs, but the output of "
                f"{' '.join(example.source)!r} is not its interpretation",
            )
        marked.append(Seq2SeqExample(example.source, target))
    return Split(marked, split.origin, split.item)


def test_set_names(data: ScanDataConfig) -> list[str]:
    return list(data.test_files) if data.split == "files" else [STANDARD_TEST_SET]


def _train_and_tests(data: ScanDataConfig) -> tuple[Split, dict[str, Split]]:
    if data.split == "files":
        assert data.train_file is not None
        train = Split(scan.read_scan_file(data.train_file), data.train_file, "line")
        tests = {
            name: Split(scan.read_scan_file(path), path, "line") for name, path in data.test_files.items()
        }
        return train, tests
    if data.split not in GENERATED_SPLITS and not data.generate:
        train_file, test_file = (str(path) for path in scan.public_split_files(data.split, data.root))
        train = Split(scan.read_scan_file(train_file), train_file, "line")
        return train, {STANDARD_TEST_SET: Split(scan.read_scan_file(test_file), test_file, "line")}
    generated = _generated_split(data)
    origin = f"generated {data.split} split"
    return Split(generated.train, f"{origin} (train)"), {
        STANDARD_TEST_SET: Split(generated.test, f"{origin} (test)")
    }


def _generated_split(data: ScanDataConfig) -> scan.ScanSplit:
    examples = scan.generate_scan()
    try:
        if data.split == "primitive":
            return scan.primitive_split(
                examples, data.primitive, oversample_fraction=data.oversample_fraction
            )
        if data.split == "template":
            return scan.template_split(examples, data.template)
        if data.split in ("random", "simple"):
            return scan.random_split(examples, test_fraction=data.test_fraction, seed=data.seed)
        if data.split == "length":
            return scan.length_split(examples, max_train_actions=data.max_train_actions)
        return scan.generate_standard_split(data.split, seed=data.seed)
    except ValueError as error:
        raise ConfigError(f"data: {error}") from None


def _hold_out(
    examples: list[Seq2SeqExample], fraction: float, seed: int
) -> tuple[list[Seq2SeqExample], list[Seq2SeqExample]]:
    size = round(fraction * len(examples))
    if not 0 < size < len(examples):
        raise ConfigError(
            f"data.validation_fraction={fraction} of {len(examples)} training examples leaves an empty "
            "training or validation set; give data.validation_file or more training examples"
        )
    return random_hold_out(examples, size, seed)


def _subset(examples: list[Seq2SeqExample], size: int, seed: int) -> list[Seq2SeqExample]:
    if size >= len(examples):
        return examples
    chosen = sorted(random.Random(seed + 1).sample(range(len(examples)), size))
    return [examples[i] for i in chosen]


def build_vocabularies(train: Sequence[Seq2SeqExample], unknown_words: str) -> tuple[Vocabulary, Vocabulary]:
    """Source and target vocabularies of the training file; with ``unk``, both also hold ``<unk>``."""
    unk = (UNK_TOKEN,) if unknown_words == "unk" else ()
    try:
        source = Vocabulary.build((ex.source for ex in train), (PAD_TOKEN, *unk))
        target = Vocabulary.build((ex.target for ex in train), (PAD_TOKEN, SOS_TOKEN, EOS_TOKEN, *unk))
    except ValueError as error:
        raise ConfigError(f"data: the training set cannot make a vocabulary: {error}") from None
    return source, target


@dataclass
class EncodedSplit:
    """A split encoded for the model, with its raw references and its ``<unk>`` counts."""

    dataset: EncodedDataset
    references: list[tuple[str, ...]]
    unknown_source_words: int = 0
    unknown_target_words: int = 0


def encode_split(split: Split, source: Vocabulary, target: Vocabulary, name: str) -> EncodedSplit:
    """Encode ``split``; unknown words are errors naming the file and line, or ``<unk>`` (counted)."""
    if not split.examples:
        raise ConfigError(f"the {name} split ({split.origin}) has no examples")
    examples, unknown_source, unknown_target = split.examples, 0, 0
    if UNK_TOKEN in source.specials:
        examples, unknown_source, unknown_target = _replace_unknown(split.examples, source, target)
    dataset = encode_examples(examples, source, target, where_prefix=split.origin, item_name=split.item)
    references = [ex.target for ex in split.examples]
    return EncodedSplit(dataset, references, unknown_source, unknown_target)


def _replace_unknown(
    examples: list[Seq2SeqExample], source: Vocabulary, target: Vocabulary
) -> tuple[list[Seq2SeqExample], int, int]:
    counts = [0, 0]

    def known(tokens: tuple[str, ...], vocabulary: Vocabulary, side: int) -> tuple[str, ...]:
        mapped = tuple(token if token in vocabulary else UNK_TOKEN for token in tokens)
        counts[side] += sum(a != b for a, b in zip(tokens, mapped))
        return mapped

    replaced = [Seq2SeqExample(known(ex.source, source, 0), known(ex.target, target, 1)) for ex in examples]
    return replaced, counts[0], counts[1]
