"""Lookup Tables generated with the machine-tasks ``LongLookupTables`` protocol (Dubois et al. 2020).

Dubois et al. (2020, §6.1, footnote 6) trained and tested on the data of
``i-machine-think/machine-tasks/LongLookupTables``. This module re-implements the protocol of that
generator as its documentation and the published ``generation_arguments.txt`` describe it, with
the published arguments as defaults (:class:`MachineTasksLookupSpec`): ``validation_size 0.05,
max_composition_train 4, n_unary_tables 8, n_heldout_tables 2, n_heldout_compositions 50,
n_heldout_inputs 2, n_longer 5, max_noise_tables 10, bound_test 5000, alphabet {0, 1},
n_repeats 3, seed 123`` (``random_start_token !`` and ``eos .`` are fixed). It is the
``machine_tasks`` *protocol*; :mod:`attnlab.tasks.lookup` keeps attnlab's own one (interpolation
and ``long1`` … ``long5`` sets), which stays the default everywhere.

The tables are random and the original generator's sequence of random-number calls was not
available to us, so the *rows* differ from the published files (seed 123 does not give the
published tables); the construction, the file names and every count are the protocol's.

Construction (``L = max_composition_train``, tables ``t1 … t8``, the last ``n_heldout_tables``
of which — ``t7``, ``t8`` — are *held-out tables*; ``t1 … t6`` are the *training tables*):

* ``train``: every table alone on every input (the 64 *unary* rows: held-out tables appear in
  training only there), every composition of 2 … ``L - 1`` training tables on every input, and
  the compositions of ``L`` training tables except ``n_heldout_compositions`` random ones, each
  without ``n_heldout_inputs`` random inputs of its own — less the validation rows. Defaults:
  ``64 + 8·36 + 8·216 + 6·(1296 − 50) = 9,556`` rows, of which ``9,492`` are compositions;
* ``validation``: ``ceil(validation_size · 9,492) = 475`` of the composition rows (the unary
  rows always stay in training; ``ceil`` is how scikit-learn's ``train_test_split`` rounds a
  fractional test size), leaving **9,081** training rows. The split is *stratified by length
  and by tables*: each length gets its proportional share (largest remainders, ties to the
  shorter length: 14 + 87 + 374 by default), and within a length the rows are spread over the
  compositions so that every composition gives ``⌊q⌋`` or ``⌈q⌉`` rows (``q`` its share; here 0
  or 1). Stratifying by composition alone is impossible at 5% (1,498 compositions, 475 rows);
* ``heldout_inputs``: the held-out inputs of the remaining ``L``-compositions (2 × 1,246);
* ``heldout_compositions``: the ``n_heldout_compositions`` compositions on every input (50 × 8);
* ``heldout_tables``: compositions of ``L`` tables of which exactly one is a held-out table
  (4 positions × 2 tables × 6³ × 8 inputs = 13,824 rows before the cut);
* ``new_compositions``: compositions of ``L`` held-out tables only (2⁴ × 8 = 128 rows);
* ``longer_seen_i``, ``longer_incremental_i``, ``longer_new_i`` for ``i = 1 … n_longer``:
  ``L + i`` tables. Level ``i`` is every training table (``seen``, ``incremental``) or every
  held-out table (``new``) prepended to every row of level ``i − 1``, where level 0 is the
  ``L``-table rows of ``train`` (``seen``), ``heldout_tables`` (``incremental``: so exactly one
  table is held out at every level) and ``new_compositions`` (``new``: held-out tables only).
  *Prepended* means applied first: ``000 t3 t1 t2 t5 t6 .`` is ``t3`` prepended to
  ``000 t1 t2 t5 t6 .``; the input stays and the targets are recomputed.

Every test set is shuffled and cut to ``bound_test`` rows (a uniform sample without
replacement), and the next level is built from the cut one. Defaults: 2,492, 400, 5,000, 128,
then 5,000 (``seen``), 5,000 (``incremental``) and 256, 512, 1,024, 2,048, 4,096 (``new``).
Train and validation are shuffled too. No row's composition (input and real tables) is in two
files, and the test sets are disjoint from ``train`` and ``validation``.

Variants (``MachineTasksLookupSpec.variant``), all with one index per target token and one for
``<eos>`` in the attention column (the machine-tasks TSV layout of :mod:`attnlab.tasks.tsv`), the
target always being the input and every intermediate result (noise never changes it):

* ``"long"``: ``000 t1 t2 .`` → ``000 110 100``, attention ``0 1 2 3`` (Table 1);
* ``"reversed"``: the input and the tables in reverse order, ``.`` stays last:
  ``t2 t1 000 .``, attention ``2 1 0 3`` (§6.1.2; the rows are those of ``long``);
* ``"noisy-single"``: ``input n_1 … n_m ! t_a … .`` with ``m ~ U{0 … max_noise_tables − 1}``
  noise tables drawn with replacement from the training tables (also in the test sets with
  held-out tables); attention ``0, m + 2, …, m + k + 2``: the input, each real table, then
  ``.`` — never the ``!`` (Table 2 is inconsistent on this; see :mod:`attnlab.tasks.lookup`);
* ``"noisy-multi"``: as ``noisy-single``, but each noise token is drawn uniformly from the
  training tables *and* ``!`` (so it is ``!`` with probability 1/7 by default); the real tables
  start after the last ``!``, which is always the one put right before them;
* ``"intermediate-noise"``: one random training table before every real table, i.e. between
  every pair of adjacent tokens of ``input t_a t_b …``: ``000 n_1 t1 n_2 t2 .``, attention
  ``0 2 4 5``. The final ``.`` is appended afterwards, as the generator appends ``eos``, so no
  noise sits before it.

Noise is drawn per row and per file from its own seeded stream. Randomness comes from the
platform-independent streams of :mod:`attnlab.tasks.lookup` (SHA-256-derived seeds,
``random.Random.random()`` only), so the output depends on the spec only.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, fields
from fractions import Fraction
from pathlib import Path

from attnlab.checks import check_choice, check_int
from attnlab.io import atomic_write_text
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.lookup import (
    END_TOKEN,
    MAX_POOL_SIZE,
    START_TOKEN,
    _distinct_permutations,
    _layout,
    _randbelow,
    _sample_indices,
    _shuffle,
    _stream,
    _table_names,
)
from attnlab.tasks.tsv import write_tsv

logger = logging.getLogger(__name__)

MACHINE_TASKS_VARIANTS = ("long", "reversed", "noisy-single", "noisy-multi", "intermediate-noise")
LONGER_FAMILIES = ("seen", "incremental", "new")
ARGUMENTS_FILE = "generation_arguments.txt"

# (input index, table indices applied left to right); table index j is table t{j+1}.
Composition = tuple[int, tuple[int, ...]]


@dataclass(frozen=True)
class MachineTasksLookupSpec:
    """The generation arguments; defaults are the published ones (see the module docstring).

    Invalid or impossible values raise :class:`ValueError` naming the argument.
    """

    variant: str = "long"
    seed: int = 123
    validation_size: float = 0.05
    max_composition_train: int = 4
    n_unary_tables: int = 8
    n_heldout_tables: int = 2
    n_heldout_compositions: int = 50
    n_heldout_inputs: int = 2
    n_longer: int = 5
    max_noise_tables: int = 10
    bound_test: int = 5000
    alphabet: tuple[str, ...] = ("0", "1")
    n_repeats: int = 3

    def __post_init__(self) -> None:
        check_choice("variant", self.variant, MACHINE_TASKS_VARIANTS)
        check_int("seed", self.seed, minimum=None)
        for name, minimum in (
            ("max_composition_train", 2),
            ("n_unary_tables", 2),
            ("n_heldout_tables", 1),
            ("n_heldout_compositions", 1),
            ("n_heldout_inputs", 1),
            ("n_longer", 0),
            ("max_noise_tables", 1),
            ("bound_test", 1),
            ("n_repeats", 1),
        ):
            check_int(name, getattr(self, name), minimum=minimum)
        value = self.validation_size
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise ValueError(f"validation_size must be a fraction in (0, 1), got {value!r}")
        object.__setattr__(
            self, "alphabet", tuple(self.alphabet) if isinstance(self.alphabet, list) else self.alphabet
        )
        self._check_alphabet()
        self._check_tables()
        self._check_sizes()

    # ---- derived sizes

    @property
    def inputs(self) -> list[str]:
        """The input strings, ``alphabet ** n_repeats`` in lexicographic order (000 … 111)."""
        return ["".join(symbols) for symbols in itertools.product(self.alphabet, repeat=self.n_repeats)]

    @property
    def n_inputs(self) -> int:
        return len(self.alphabet) ** self.n_repeats

    @property
    def n_train_tables(self) -> int:
        """Tables that are composed in training (``t1 … t6`` by default)."""
        return self.n_unary_tables - self.n_heldout_tables

    @property
    def n_longest_compositions(self) -> int:
        """Compositions of ``max_composition_train`` training tables (6⁴ = 1,296 by default)."""
        return self.n_train_tables**self.max_composition_train

    @property
    def n_composition_rows(self) -> int:
        """Training-eligible rows with 2 … ``max_composition_train`` tables (9,492 by default)."""
        shorter = sum(self.n_train_tables**k for k in range(2, self.max_composition_train))
        kept = self.n_longest_compositions - self.n_heldout_compositions
        return shorter * self.n_inputs + kept * (self.n_inputs - self.n_heldout_inputs)

    @property
    def n_validation(self) -> int:
        """Validation rows: ``ceil(validation_size · n_composition_rows)`` (475 by default)."""
        return math.ceil(self.validation_size * self.n_composition_rows)

    def _check_alphabet(self) -> None:
        alphabet = self.alphabet
        if not isinstance(alphabet, tuple) or not alphabet:
            raise ValueError(f"alphabet must be a non-empty list of symbols, got {alphabet!r}")
        for symbol in alphabet:
            if not isinstance(symbol, str) or not symbol or symbol.split() != [symbol]:
                raise ValueError(f"alphabet symbols must be non-empty strings without spaces, got {symbol!r}")
        if len(set(alphabet)) != len(alphabet):
            raise ValueError(f"alphabet has repeated symbols: {list(alphabet)}")
        if self.n_inputs > 2**16:
            raise ValueError(
                f"alphabet ** n_repeats = {self.n_inputs:,} inputs; at most {2**16:,} are supported"
            )
        inputs = self.inputs
        if len(set(inputs)) != len(inputs):
            raise ValueError(
                f"alphabet {list(alphabet)} spells some input twice with n_repeats={self.n_repeats}"
            )
        clash = set(inputs) & {*_table_names(self.n_unary_tables), END_TOKEN, START_TOKEN}
        if clash:
            raise ValueError(
                f"alphabet {list(alphabet)} spells inputs that are table or special tokens: {sorted(clash)}"
            )

    def _check_tables(self) -> None:
        if self.n_heldout_tables >= self.n_unary_tables:
            raise ValueError(
                f"n_heldout_tables={self.n_heldout_tables} leaves no training table of the "
                f"n_unary_tables={self.n_unary_tables}"
            )
        if self.n_inputs <= 8 and self.n_unary_tables > math.factorial(self.n_inputs):
            raise ValueError(
                f"n_unary_tables={self.n_unary_tables} distinct tables requested, but only "
                f"{math.factorial(self.n_inputs)} bijections exist on {self.n_inputs} inputs"
            )
        if self.n_heldout_inputs >= self.n_inputs:
            raise ValueError(
                f"n_heldout_inputs={self.n_heldout_inputs} must be less than the {self.n_inputs} inputs "
                "(each kept composition needs a training input)"
            )
        if self.n_heldout_compositions >= self.n_longest_compositions:
            raise ValueError(
                f"n_heldout_compositions={self.n_heldout_compositions} must be less than the "
                f"{self.n_longest_compositions:,} compositions of max_composition_train="
                f"{self.max_composition_train} of the {self.n_train_tables} training tables"
            )

    def _check_sizes(self) -> None:
        length = self.max_composition_train
        enumerated = {
            "training compositions": sum(self.n_train_tables**k for k in range(2, length + 1))
            * self.n_inputs,
            "heldout_tables rows": length
            * self.n_heldout_tables
            * self.n_train_tables ** (length - 1)
            * self.n_inputs,
            "new_compositions rows": self.n_heldout_tables**length * self.n_inputs,
        }
        for what, size in enumerated.items():
            if size > MAX_POOL_SIZE:
                raise ValueError(
                    f"max_composition_train={length} with {self.n_unary_tables} tables and "
                    f"{self.n_inputs} inputs gives {size:,} {what}; at most {MAX_POOL_SIZE:,} are supported"
                )
        if self.bound_test > MAX_POOL_SIZE:
            raise ValueError(f"bound_test must be at most {MAX_POOL_SIZE:,}, got {self.bound_test:,}")

    def arguments(self) -> dict[str, object]:
        """The generation arguments, as written to ``generation_arguments.txt``."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


def machine_tasks_test_set_names(n_longer: int = 5) -> list[str]:
    """The test files of the protocol, in the order they are generated and written."""
    check_int("n_longer", n_longer, minimum=0)
    return [
        "heldout_inputs",
        "heldout_compositions",
        "heldout_tables",
        "new_compositions",
        *(f"longer_{family}_{i}" for family in LONGER_FAMILIES for i in range(1, n_longer + 1)),
    ]


# --------------------------------------------------------------------------------------------
# Compositions.


def _cut(spec: MachineTasksLookupSpec, name: str, rows: Sequence[Composition]) -> list[Composition]:
    """``rows`` shuffled and cut to ``bound_test`` (a uniform sample in random order)."""
    rng = _stream(spec.seed, f"machine_tasks/order/{name}")
    return [rows[i] for i in _sample_indices(rng, len(rows), min(len(rows), spec.bound_test))]


def _prepend_level(
    spec: MachineTasksLookupSpec, name: str, base: Sequence[Composition], tables: Sequence[int]
) -> list[Composition]:
    """Every table of ``tables`` prepended to every row of ``base``, shuffled and cut.

    The ``len(base) · len(tables)`` rows are sampled by index without being built first.
    """
    rng = _stream(spec.seed, f"machine_tasks/order/{name}")
    n_tables = len(tables)
    population = len(base) * n_tables
    picked = []
    for index in _sample_indices(rng, population, min(population, spec.bound_test)):
        row, table = divmod(index, n_tables)
        input_index, composition = base[row]
        picked.append((input_index, (tables[table], *composition)))
    return picked


def _largest_remainder(sizes: dict[int, int], count: int) -> dict[int, int]:
    """``count`` split over strata in proportion to ``sizes`` (ties to the smaller key)."""
    total = sum(sizes.values())
    exact = {key: Fraction(count * size, total) for key, size in sizes.items()}
    quotas = {key: math.floor(share) for key, share in exact.items()}
    left = count - sum(quotas.values())
    for key in sorted(sizes, key=lambda k: (quotas[k] - exact[k], k))[:left]:
        quotas[key] += 1
    return quotas


def _spread_over_compositions(rng: random.Random, rows: list[Composition], count: int) -> list[Composition]:
    """``count`` rows, round-robin over the compositions (tables) in random order."""
    groups: dict[tuple[int, ...], list[Composition]] = {}
    for row in rows:
        groups.setdefault(row[1], []).append(row)
    order = list(groups.values())
    _shuffle(rng, order)
    for group in order:
        _shuffle(rng, group)
    picked: list[Composition] = []
    depth = 0
    while len(picked) < count:
        for group in order:
            if depth < len(group):
                picked.append(group[depth])
                if len(picked) == count:
                    break
        depth += 1
    return picked


def _stratified_validation(
    spec: MachineTasksLookupSpec, by_length: dict[int, list[Composition]]
) -> list[Composition]:
    quotas = _largest_remainder({k: len(rows) for k, rows in by_length.items()}, spec.n_validation)
    rng = _stream(spec.seed, "machine_tasks/validation")
    picked: list[Composition] = []
    for length in sorted(by_length):
        picked += _spread_over_compositions(rng, by_length[length], quotas[length])
    return picked


def _with_one_heldout(spec: MachineTasksLookupSpec, length: int) -> list[tuple[int, ...]]:
    """Compositions of ``length`` tables of which exactly one is a held-out table."""
    train_tables = range(spec.n_train_tables)
    heldout = range(spec.n_train_tables, spec.n_unary_tables)
    return [
        (*rest[:position], table, *rest[position:])
        for position in range(length)
        for table in heldout
        for rest in itertools.product(train_tables, repeat=length - 1)
    ]


def machine_tasks_compositions(spec: MachineTasksLookupSpec) -> dict[str, list[Composition]]:
    """Every file's compositions (see the module docstring), in file order and row order."""
    length = spec.max_composition_train
    inputs = range(spec.n_inputs)
    train_tables = list(range(spec.n_train_tables))
    heldout_tables = list(range(spec.n_train_tables, spec.n_unary_tables))

    unary = [(x, (table,)) for table in range(spec.n_unary_tables) for x in inputs]
    by_length = {
        k: [(x, tables) for tables in itertools.product(train_tables, repeat=k) for x in inputs]
        for k in range(2, length)
    }
    longest = list(itertools.product(train_tables, repeat=length))
    rng = _stream(spec.seed, "machine_tasks/heldout_compositions")
    held_out = sorted(_sample_indices(rng, len(longest), spec.n_heldout_compositions))
    heldout_compositions = [(x, longest[i]) for i in held_out for x in inputs]
    rng = _stream(spec.seed, "machine_tasks/heldout_inputs")
    skip = set(held_out)
    kept: list[Composition] = []
    heldout_inputs: list[Composition] = []
    for index, tables in enumerate(longest):
        if index in skip:
            continue
        out = set(_sample_indices(rng, spec.n_inputs, spec.n_heldout_inputs))
        for x in inputs:
            (heldout_inputs if x in out else kept).append((x, tables))
    by_length[length] = kept

    validation = _stratified_validation(spec, by_length)
    in_validation = set(validation)
    train = unary + [row for k in sorted(by_length) for row in by_length[k] if row not in in_validation]
    _shuffle(_stream(spec.seed, "machine_tasks/order/train"), train)
    _shuffle(_stream(spec.seed, "machine_tasks/order/validation"), validation)

    splits = {
        "train": train,
        "validation": validation,
        "heldout_inputs": _cut(spec, "heldout_inputs", heldout_inputs),
        "heldout_compositions": _cut(spec, "heldout_compositions", heldout_compositions),
        "heldout_tables": _cut(
            spec, "heldout_tables", [(x, t) for t in _with_one_heldout(spec, length) for x in inputs]
        ),
        "new_compositions": _cut(
            spec,
            "new_compositions",
            [(x, t) for t in itertools.product(heldout_tables, repeat=length) for x in inputs],
        ),
    }
    levels = {
        "seen": ([row for row in train if len(row[1]) == length], train_tables),
        "incremental": (splits["heldout_tables"], train_tables),
        "new": (splits["new_compositions"], heldout_tables),
    }
    for family, (base, level_tables) in levels.items():
        for i in range(1, spec.n_longer + 1):
            name = f"longer_{family}_{i}"
            base = splits[name] = _prepend_level(spec, name, base, level_tables)
    return {
        name: splits[name] for name in ("train", "validation", *machine_tasks_test_set_names(spec.n_longer))
    }


# --------------------------------------------------------------------------------------------
# Rows.


class _RowMaker:
    """Turns compositions into the rows of one variant (tables, targets, noise, attention)."""

    def __init__(self, spec: MachineTasksLookupSpec) -> None:
        self.spec = spec
        self.inputs = spec.inputs
        self.names = _table_names(spec.n_unary_tables)
        rng = _stream(spec.seed, "machine_tasks/tables")
        self.permutations = _distinct_permutations(rng, spec.n_inputs, spec.n_unary_tables)
        noise = self.names[: spec.n_train_tables]
        self.noise_tokens = [*noise, START_TOKEN] if spec.variant == "noisy-multi" else noise

    def functions(self) -> dict[str, dict[str, str]]:
        inputs = self.inputs
        return {
            name: {inputs[i]: inputs[out] for i, out in enumerate(permutation)}
            for name, permutation in zip(self.names, self.permutations)
        }

    def rows(self, split: str, compositions: list[Composition]) -> list[Seq2SeqExample]:
        rng = _stream(self.spec.seed, f"machine_tasks/noise/{split}")
        return [self._row(rng, composition) for composition in compositions]

    def _row(self, rng: random.Random, composition: Composition) -> Seq2SeqExample:
        input_index, table_indices = composition
        value = input_index
        target = [self.inputs[value]]
        for table in table_indices:
            value = self.permutations[table][value]
            target.append(self.inputs[value])
        tables = tuple(self.names[t] for t in table_indices)
        variant = self.spec.variant
        if variant in ("long", "reversed"):
            source, attention = _layout(variant, target[0], tables, ())
        elif variant == "intermediate-noise":
            source, attention = _intermediate_layout(target[0], tables, self._noise(rng, len(tables)))
        else:
            count = _randbelow(rng, self.spec.max_noise_tables)
            source, attention = _layout("noisy", target[0], tables, self._noise(rng, count))
        return Seq2SeqExample(source=source, target=tuple(target), attention=attention)

    def _noise(self, rng: random.Random, count: int) -> tuple[str, ...]:
        tokens = self.noise_tokens
        return tuple(tokens[_randbelow(rng, len(tokens))] for _ in range(count))


def _intermediate_layout(
    input_bits: str, tables: tuple[str, ...], noise: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``input n_1 t_1 … n_k t_k .`` and its gold attention ``0 2 4 … 2k 2k+1``."""
    source = (input_bits, *itertools.chain.from_iterable(zip(noise, tables)), END_TOKEN)
    k = len(tables)
    return source, (0, *range(2, 2 * k + 1, 2), 2 * k + 1)


def machine_tasks_table_functions(spec: MachineTasksLookupSpec) -> dict[str, dict[str, str]]:
    """The tables of ``spec``: ``{"t1": {"000": "110", …}, …, "t8": …}``."""
    return _RowMaker(spec).functions()


def generate_machine_tasks_lookup(spec: MachineTasksLookupSpec) -> dict[str, list[Seq2SeqExample]]:
    """Every file of the protocol → its rows: ``train``, ``validation``, then the test sets of
    :func:`machine_tasks_test_set_names`. Deterministic in ``spec``."""
    make = _RowMaker(spec)
    splits = {name: make.rows(name, rows) for name, rows in machine_tasks_compositions(spec).items()}
    logger.info(
        "machine-tasks lookup tables (%s, seed %d): %s",
        spec.variant,
        spec.seed,
        ", ".join(f"{name} {len(rows)}" for name, rows in splits.items()),
    )
    return splits


def machine_tasks_composition(example: Seq2SeqExample, variant: str) -> tuple[str, ...]:
    """``(input, first real table, …, last real table)`` of a row of ``variant``, without noise."""
    check_choice("variant", variant, MACHINE_TASKS_VARIANTS)
    source = example.source
    if len(source) < 3 or source[-1] != END_TOKEN:
        raise ValueError(f"not a lookup row (no input, table and final {END_TOKEN!r}): {source}")
    if variant == "long":
        return tuple(source[:-1])
    if variant == "reversed":
        return (source[-2], *reversed(source[:-2]))
    if variant in ("noisy-single", "noisy-multi"):
        if START_TOKEN not in source:
            raise ValueError(f"not a noisy lookup row (no {START_TOKEN!r}): {source}")
        last = len(source) - 1 - source[::-1].index(START_TOKEN)
        return (source[0], *source[last + 1 : -1])
    return (source[0], *source[2:-1:2])  # intermediate-noise


def write_machine_tasks_lookup(
    spec: MachineTasksLookupSpec, out_dir: str | os.PathLike[str]
) -> dict[Path, int]:
    """Write every file as ``out_dir/{name}.tsv`` (machine-tasks TSV) and the arguments to
    ``out_dir/generation_arguments.txt`` (``name value`` lines); returns path → number of rows."""
    out = Path(out_dir)
    written: dict[Path, int] = {}
    for name, rows in generate_machine_tasks_lookup(spec).items():
        write_tsv(out / f"{name}.tsv", rows)
        written[out / f"{name}.tsv"] = len(rows)
    arguments = {
        "protocol": "machine_tasks (attnlab re-implementation of LongLookupTables)",
        **spec.arguments(),
        "random_start_token": START_TOKEN if spec.variant.startswith("noisy") else None,
        "eos": END_TOKEN,
    }
    text = "".join(f"{key} {_argument_text(value)}\n" for key, value in arguments.items())
    atomic_write_text(out / ARGUMENTS_FILE, text)
    return written


def _argument_text(value: object) -> str:
    if isinstance(value, tuple):
        return "{" + ", ".join(str(item) for item in value) + "}"
    return str(value)
