"""Lookup-table composition tasks of Dubois et al. (2020), §6.1 and Tables 1–2.

A *lookup table* ``t_i`` is a random bijection on the ``2**n_bits`` bit strings (``"000"`` …
``"111"`` for the paper's 3 bits). An example composes ``k`` tables, written left to right, and
the target lists the input and every intermediate result (Hupkes et al., 2018)::

    source  000 t1 t2 .              (§6.1.1, Table 1)
    target  000 110 100              (t1(000) = 110, t2(110) = 100; <eos> is implicit)
    gold    0   1   2   3            (output i attends source position i; <eos> attends ".")

Three variants (``LookupTablesSpec.variant``):

* ``"long"`` – Long Lookup Tables (§6.1.1, Table 1), as above.
* ``"reversed"`` – Reversed Lookup Tables (§6.1.2): the source is ``t_last … t_first input .``,
  the target is unchanged, so ``t2 t1 t1 000 .`` has gold attention ``3 2 1 0 4``.
* ``"noisy"`` – Lookup Tables with Noisy Start (§6.1.3, Table 2): ``m ~ U{0..max_noise_tables}``
  random tables and a start token ``!`` are put between the input and the real tables:
  ``input n_1 … n_m ! t_a t_b … .``; the target is unchanged and the gold attention is
  ``0, m+2, m+3, …, m+k+2`` (the input, then each real table, then ``.`` for ``<eos>``).

  Table 2 of the paper is not self-consistent here: its rows with noise (``m >= 1``) list
  ``len(target) + 2`` indices, with the position of ``!`` inserted after the ``0`` (e.g.
  ``000 t2 ! t1 .`` → ``0 2 3 4``), whereas its row without noise (``110 ! t2 .`` → ``0 2 3``),
  Table 1, the reversed example of §6.1.2 and the machine-tasks TSV format all have exactly one
  index per target token plus one for ``<eos>``. We follow the latter convention, which is also
  the one the text describes ("first attend to the input, then to the token which follows !"):
  ``000 t2 ! t1 .`` → ``0 3 4``; ``000 t6 t3 ! t1 t1 t2 .`` → ``0 4 5 6 7``.

Splits (§6.1.1), produced by :func:`generate_lookup_tables`:

* the *pool* holds every composition with ``k = 1 … train_max_tables`` tables (tables may
  repeat) of every input: ``8 · (6 + 36 + 216 + 1296) = 12,432`` pairs by default;
* ``"interpolation"``: ``interpolation_size`` pairs sampled from the pool's ``k >= 2`` part;
* ``"validation"``: ``validation_size`` pairs sampled from the rest of the ``k >= 2`` part
  (the paper does not say where its validation data come from; all ``k = 1`` pairs stay in
  training so that every table is seen on its own);
* ``"train"``: every other pool pair (8,932 by default; "approximately 10000" in the paper);
* ``"long1"`` … ``"long{long_levels}"``: ``long_size`` pairs each, sampled without replacement
  from all compositions with ``k = train_max_tables + j`` tables.

Splits are disjoint by *composition* (input and real tables); noise tables are not part of it.
Every split is listed in a seeded random order.

Randomness: all draws come from :class:`random.Random` instances seeded with integers derived
from ``(seed, stream name)`` through SHA-256, and only their ``random()`` method is used (whose
sequence Python guarantees across versions), with our own unbiased integer sampling, shuffling
and Floyd sampling on top. Output therefore depends on the arguments only — not on ``hash()``,
the process, or the Python/numpy version. The tables, the splits, each split's order and each
split's noise use separate streams, so e.g. changing ``validation_size`` does not change tables.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from attnlab.checks import check_choice, check_int
from attnlab.tasks.examples import Seq2SeqExample

VARIANTS = ("long", "reversed", "noisy")
END_TOKEN = "."
START_TOKEN = "!"

#: Refuse to enumerate training pools larger than this (memory and time).
MAX_POOL_SIZE = 2_000_000

# random() returns multiples of 2**-53 in [0, 1), so each call gives exactly 53 random bits.
_BITS_PER_DRAW = 53
_DRAW_SCALE = float(2**_BITS_PER_DRAW)


@dataclass(frozen=True)
class LookupTablesSpec:
    """What to generate; defaults reproduce the sizes of Dubois et al. (2020), §6.1.

    Invalid values raise :class:`ValueError` on construction.
    """

    variant: str = "long"
    seed: int = 0
    n_tables: int = 6
    n_bits: int = 3
    train_max_tables: int = 4
    interpolation_size: int = 3000
    validation_size: int = 500
    long_levels: int = 5
    long_size: int = 5000
    max_noise_tables: int = 10

    def __post_init__(self) -> None:
        check_choice("variant", self.variant, VARIANTS)
        check_int("seed", self.seed, minimum=None)
        for name, minimum in (
            ("n_tables", 1),
            ("n_bits", 1),
            ("train_max_tables", 1),
            ("interpolation_size", 0),
            ("validation_size", 0),
            ("long_levels", 0),
            ("long_size", 0),
            ("max_noise_tables", 0),
        ):
            check_int(name, getattr(self, name), minimum=minimum)
        self._check_table_count()
        self._check_pool_sizes()

    @property
    def n_inputs(self) -> int:
        """Number of distinct bit strings, ``2**n_bits``."""
        return 2**self.n_bits

    def n_compositions(self, k: int) -> int:
        """Number of (input, k tables) pairs: ``2**n_bits * n_tables**k``."""
        return self.n_inputs * self.n_tables**k

    @property
    def pool_size(self) -> int:
        """Number of pairs with ``k = 1 … train_max_tables`` tables (12,432 by default)."""
        return sum(self.n_compositions(k) for k in range(1, self.train_max_tables + 1))

    @property
    def heldout_pool_size(self) -> int:
        """Pool pairs with ``k >= 2``, from which interpolation and validation are drawn."""
        return self.pool_size - self.n_compositions(1)

    def _check_table_count(self) -> None:
        if self.n_bits > 16:
            raise ValueError(f"n_bits must be at most 16, got {self.n_bits}")
        if self.n_inputs <= 8:
            n_bijections = math.factorial(self.n_inputs)
            if self.n_tables > n_bijections:
                raise ValueError(
                    f"n_tables={self.n_tables} distinct tables requested, but only "
                    f"{n_bijections} bijections exist on {self.n_bits}-bit strings"
                )

    def _check_pool_sizes(self) -> None:
        if self.pool_size > MAX_POOL_SIZE:
            raise ValueError(
                f"the training pool would hold {self.pool_size:,} pairs (n_bits={self.n_bits}, "
                f"n_tables={self.n_tables}, train_max_tables={self.train_max_tables}); "
                f"at most {MAX_POOL_SIZE:,} are supported"
            )
        available = self.heldout_pool_size
        if self.interpolation_size > available:
            raise ValueError(
                f"interpolation_size={self.interpolation_size} exceeds the {available:,} pairs "
                f"with 2..{self.train_max_tables} tables that exist"
            )
        left = available - self.interpolation_size
        if self.validation_size > left:
            raise ValueError(
                f"validation_size={self.validation_size} exceeds the {left:,} pairs with "
                f"2..{self.train_max_tables} tables left after the "
                f"{self.interpolation_size} interpolation pairs ({available:,} exist in all)"
            )
        if self.long_levels > 0:
            shortest = self.train_max_tables + 1
            exist = self.n_compositions(shortest)
            if self.long_size > exist:
                raise ValueError(
                    f"long_size={self.long_size} exceeds the {exist:,} pairs with {shortest} "
                    f"tables that exist (long1)"
                )


# --------------------------------------------------------------------------------------------
# Seeded randomness built on random.Random.random() only.


def _stream(seed: int, name: str) -> random.Random:
    digest = hashlib.sha256(f"attnlab.tasks.lookup:{seed}:{name}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def _randbelow(rng: random.Random, n: int) -> int:
    """Uniform integer in ``[0, n)`` by rejection sampling on 53-bit draws."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    bits = (n - 1).bit_length()
    if bits <= _BITS_PER_DRAW:
        shift = _BITS_PER_DRAW - bits
        while True:
            value = int(rng.random() * _DRAW_SCALE) >> shift
            if value < n:
                return value
    while True:
        value, have = 0, 0
        while have < bits:
            value = (value << _BITS_PER_DRAW) | int(rng.random() * _DRAW_SCALE)
            have += _BITS_PER_DRAW
        value >>= have - bits
        if value < n:
            return value


def _uniform_sampler(rng: random.Random, n: int) -> Callable[[], int]:
    """A fast ``lambda: _randbelow(rng, n)`` for a fixed ``n`` (same draws, same results)."""
    if n <= 0 or (n - 1).bit_length() > _BITS_PER_DRAW:
        return lambda: _randbelow(rng, n)
    shift = _BITS_PER_DRAW - (n - 1).bit_length()
    draw_float = rng.random

    def draw() -> int:
        value = int(draw_float() * _DRAW_SCALE) >> shift
        while value >= n:
            value = int(draw_float() * _DRAW_SCALE) >> shift
        return value

    return draw


def _shuffle(rng: random.Random, items: list) -> None:
    """Fisher–Yates shuffle in place."""
    for i in range(len(items) - 1, 0, -1):
        j = _randbelow(rng, i + 1)
        items[i], items[j] = items[j], items[i]


def _sample_indices(rng: random.Random, population: int, k: int) -> list[int]:
    """``k`` distinct integers of ``range(population)`` (Floyd's algorithm), in random order."""
    chosen: set[int] = set()
    picked: list[int] = []
    for j in range(population - k, population):
        t = _randbelow(rng, j + 1)
        if t in chosen:
            t = j
        chosen.add(t)
        picked.append(t)
    _shuffle(rng, picked)
    return picked


# --------------------------------------------------------------------------------------------
# Tables and compositions.

# A composition: (input index, table indices applied left to right).
Composition = tuple[int, tuple[int, ...]]


def _bit_strings(n_bits: int) -> list[str]:
    return [format(i, f"0{n_bits}b") for i in range(2**n_bits)]


def _table_names(n_tables: int) -> list[str]:
    return [f"t{i + 1}" for i in range(n_tables)]


def _table_permutations(spec: LookupTablesSpec) -> list[list[int]]:
    """``n_tables`` distinct random permutations of ``range(2**n_bits)``."""
    return _distinct_permutations(_stream(spec.seed, f"tables/{spec.n_bits}"), spec.n_inputs, spec.n_tables)


def _distinct_permutations(rng: random.Random, size: int, count: int) -> list[list[int]]:
    """``count`` distinct random permutations of ``range(size)`` (redrawing repeats)."""
    tables: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    while len(tables) < count:
        permutation = list(range(size))
        _shuffle(rng, permutation)
        if tuple(permutation) not in seen:
            seen.add(tuple(permutation))
            tables.append(permutation)
    return tables


def lookup_table_functions(spec: LookupTablesSpec) -> dict[str, dict[str, str]]:
    """The tables of ``spec``: ``{"t1": {"000": "110", …}, …}`` (bijections on bit strings)."""
    bits = _bit_strings(spec.n_bits)
    return {
        name: {bits[i]: bits[out] for i, out in enumerate(permutation)}
        for name, permutation in zip(_table_names(spec.n_tables), _table_permutations(spec))
    }


def _decode_composition(index: int, k: int, spec: LookupTablesSpec) -> Composition:
    """The ``index``-th of the ``spec.n_compositions(k)`` compositions (mixed radix)."""
    index, input_index = divmod(index, spec.n_inputs)
    tables = []
    for _ in range(k):
        index, table = divmod(index, spec.n_tables)
        tables.append(table)
    return input_index, tuple(tables)


def _pool(spec: LookupTablesSpec, ks: range) -> list[Composition]:
    """Every composition with ``k in ks`` tables, in a fixed order."""
    inputs = range(spec.n_inputs)
    return [
        (input_index, tables)
        for k in ks
        for tables in itertools.product(range(spec.n_tables), repeat=k)
        for input_index in inputs
    ]


# --------------------------------------------------------------------------------------------
# Examples.


def lookup_example(
    variant: str,
    input_bits: str,
    tables: Sequence[str],
    functions: Mapping[str, Mapping[str, str]],
    *,
    noise: Sequence[str] = (),
) -> Seq2SeqExample:
    """The example composing ``tables`` (left to right) on ``input_bits``.

    ``functions`` maps table names to their mappings (see :func:`lookup_table_functions`);
    ``noise`` lists the noise tables put before ``!`` (``"noisy"`` variant only). See the module
    docstring for the layouts (Dubois et al. 2020, Tables 1–2).
    """
    check_choice("variant", variant, VARIANTS)
    if not tables:
        raise ValueError("a lookup example needs at least one table")
    if noise and variant != "noisy":
        raise ValueError(f"noise tables are only used by the 'noisy' variant, not {variant!r}")
    for name in (*tables, *noise):
        if name not in functions:
            raise ValueError(f"unknown table {name!r}; known: {sorted(functions)}")
    target = [input_bits]
    for name in tables:
        table = functions[name]
        if target[-1] not in table:
            raise ValueError(f"table {name!r} has no entry for {target[-1]!r}")
        target.append(table[target[-1]])
    source, attention = _layout(variant, input_bits, tuple(tables), tuple(noise))
    return Seq2SeqExample(source=source, target=tuple(target), attention=attention)


def _layout(
    variant: str, input_bits: str, tables: tuple[str, ...], noise: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Source tokens and gold attention (one index per target token, then one for <eos>)."""
    k = len(tables)
    if variant == "long":
        return (input_bits, *tables, END_TOKEN), tuple(range(k + 2))
    if variant == "reversed":
        source = (*reversed(tables), input_bits, END_TOKEN)
        return source, (*range(k, -1, -1), k + 1)
    m = len(noise)
    source = (input_bits, *noise, START_TOKEN, *tables, END_TOKEN)
    return source, (0, *range(m + 2, m + k + 3))


def lookup_composition(example: Seq2SeqExample, variant: str) -> tuple[str, ...]:
    """``(input, first table, …, last table)`` of a lookup example, without noise tables.

    Two examples with the same composition have the same target; split disjointness is by it.
    """
    check_choice("variant", variant, VARIANTS)
    source = example.source
    if not source or source[-1] != END_TOKEN:
        raise ValueError(f"not a lookup example (no final {END_TOKEN!r}): {source}")
    if variant == "long":
        return tuple(source[:-1])
    if variant == "reversed":
        return (source[-2], *reversed(source[:-2]))
    if START_TOKEN not in source:  # noisy
        raise ValueError(f"not a noisy lookup example (no {START_TOKEN!r}): {source}")
    start = source.index(START_TOKEN)
    return (source[0], *source[start + 1 : -1])


class _ExampleMaker:
    """Turns compositions into examples of one variant, drawing noise from one stream."""

    def __init__(self, spec: LookupTablesSpec, noise_stream: str) -> None:
        self.spec = spec
        self.bits = _bit_strings(spec.n_bits)
        self.names = _table_names(spec.n_tables)
        self.permutations = _table_permutations(spec)
        rng = _stream(spec.seed, noise_stream)
        self.noisy = spec.variant == "noisy"
        self.draw_count = _uniform_sampler(rng, spec.max_noise_tables + 1)
        self.draw_table = _uniform_sampler(rng, spec.n_tables)

    def __call__(self, composition: Composition) -> Seq2SeqExample:
        input_index, table_indices = composition
        bits, permutations = self.bits, self.permutations
        value = input_index
        target = [bits[value]]
        for table in table_indices:
            value = permutations[table][value]
            target.append(bits[value])
        tables = tuple([self.names[t] for t in table_indices])
        source, attention = _layout(self.spec.variant, target[0], tables, self._noise())
        return Seq2SeqExample(source=source, target=tuple(target), attention=attention)

    def _noise(self) -> tuple[str, ...]:
        if not self.noisy:
            return ()
        names, draw_table = self.names, self.draw_table
        return tuple([names[draw_table()] for _ in range(self.draw_count())])


def _make_split(spec: LookupTablesSpec, name: str, compositions: list[Composition]) -> list[Seq2SeqExample]:
    make = _ExampleMaker(spec, f"noise/{name}")
    return [make(c) for c in compositions]


def _split_pool(spec: LookupTablesSpec) -> dict[str, list[Composition]]:
    """Train / validation / interpolation compositions, each in seeded random order."""
    singles = _pool(spec, range(1, 2))
    heldout_pool = _pool(spec, range(2, spec.train_max_tables + 1))
    rng = _stream(spec.seed, "split/pool")
    picked = _sample_indices(rng, len(heldout_pool), spec.interpolation_size + spec.validation_size)
    interpolation = picked[: spec.interpolation_size]
    validation = picked[spec.interpolation_size :]
    taken = set(picked)
    train = singles + [c for i, c in enumerate(heldout_pool) if i not in taken]
    _shuffle(_stream(spec.seed, "order/train"), train)
    return {
        "train": train,
        "validation": [heldout_pool[i] for i in validation],
        "interpolation": [heldout_pool[i] for i in interpolation],
    }


def _long_split(spec: LookupTablesSpec, level: int) -> list[Composition]:
    k = spec.train_max_tables + level
    rng = _stream(spec.seed, f"split/long{level}")
    indices = _sample_indices(rng, spec.n_compositions(k), spec.long_size)
    return [_decode_composition(i, k, spec) for i in indices]


def _iter_split_compositions(spec: LookupTablesSpec) -> Iterator[tuple[str, list[Composition]]]:
    yield from _split_pool(spec).items()
    for level in range(1, spec.long_levels + 1):
        yield f"long{level}", _long_split(spec, level)


def generate_lookup_tables(spec: LookupTablesSpec) -> dict[str, list[Seq2SeqExample]]:
    """All splits of the lookup-table task ``spec`` (Dubois et al. 2020, §6.1).

    Returns ``{"train", "validation", "interpolation", "long1", …, "long{long_levels}"}`` →
    examples; see the module docstring for their contents. Deterministic in ``spec``.
    """
    return {name: _make_split(spec, name, comps) for name, comps in _iter_split_compositions(spec)}
