"""Lookup-table generator: sizes, disjointness, targets, gold attention (Dubois et al. §6.1)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections import Counter
from functools import cache
from itertools import product

import pytest

from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.lookup import (
    VARIANTS,
    LookupTablesSpec,
    generate_lookup_tables,
    lookup_composition,
    lookup_example,
    lookup_table_functions,
)

POOL_SPLITS = ("train", "validation", "interpolation")
LONG_SPLITS = tuple(f"long{j}" for j in range(1, 6))


@cache
def splits(variant: str) -> dict[str, list[Seq2SeqExample]]:
    """The default splits of ``variant``, generated once per test session."""
    return generate_lookup_tables(LookupTablesSpec(variant=variant))


def compositions(variant: str, name: str) -> list[tuple[str, ...]]:
    return [lookup_composition(ex, variant) for ex in splits(variant)[name]]


def digest(data: dict[str, list[Seq2SeqExample]]) -> str:
    text = repr(sorted((k, [(e.source, e.target, e.attention) for e in v]) for k, v in data.items()))
    return hashlib.sha256(text.encode()).hexdigest()


# ---- sizes and splits ------------------------------------------------------------------------


def test_default_sizes_match_the_paper() -> None:
    spec = LookupTablesSpec()
    assert spec.pool_size == 8 * (6 + 36 + 216 + 1296) == 12_432
    data = splits("long")
    assert list(data) == [*POOL_SPLITS, *LONG_SPLITS]
    assert len(data["interpolation"]) == 3000
    assert len(data["validation"]) == 500
    assert len(data["train"]) == 12_432 - 3500
    assert sum(len(data[name]) for name in POOL_SPLITS) == spec.pool_size
    for name in LONG_SPLITS:
        assert len(data[name]) == 5000


@pytest.mark.parametrize("variant", VARIANTS)
def test_pool_splits_partition_all_compositions(variant: str) -> None:
    spec = LookupTablesSpec(variant=variant)
    bits = [format(i, "03b") for i in range(8)]
    names = [f"t{i}" for i in range(1, 7)]
    everything = {(inp, *tables) for k in range(1, 5) for tables in product(names, repeat=k) for inp in bits}
    assert len(everything) == spec.pool_size
    parts = {name: compositions(variant, name) for name in POOL_SPLITS}
    for name, comps in parts.items():
        assert len(set(comps)) == len(comps), f"duplicates in {name}"
    train, validation, interpolation = (set(parts[n]) for n in POOL_SPLITS)
    assert not train & interpolation
    assert not train & validation
    assert not validation & interpolation
    assert train | validation | interpolation == everything


@pytest.mark.parametrize("variant", VARIANTS)
def test_test_compositions_never_in_training(variant: str) -> None:
    train = set(compositions(variant, "train"))
    for name in ("validation", "interpolation", *LONG_SPLITS):
        assert not train & set(compositions(variant, name)), name


@pytest.mark.parametrize("variant", VARIANTS)
def test_number_of_tables_per_split(variant: str) -> None:
    def ks(name: str) -> Counter:
        return Counter(len(c) - 1 for c in compositions(variant, name))

    # Every single-table pair stays in training, so every table is seen on its own.
    assert ks("train")[1] == 8 * 6
    assert set(ks("train")) == {1, 2, 3, 4}
    assert set(ks("interpolation")) == {2, 3, 4}
    assert set(ks("validation")) == {2, 3, 4}
    for j, name in enumerate(LONG_SPLITS, start=1):
        assert ks(name) == Counter({4 + j: 5000})
        assert len(set(compositions(variant, name))) == 5000  # without replacement


# ---- targets and gold attention ----------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_targets_follow_the_tables(variant: str) -> None:
    functions = lookup_table_functions(LookupTablesSpec(variant=variant))
    for name, examples in splits(variant).items():
        for example in examples:
            inp, *tables = lookup_composition(example, variant)
            expected = [inp]
            for table in tables:
                expected.append(functions[table][expected[-1]])
            assert example.target == tuple(expected), (name, example)


@pytest.mark.parametrize("variant", VARIANTS)
def test_gold_attention_points_at_the_table_used(variant: str) -> None:
    for examples in splits(variant).values():
        for ex in examples:
            inp, *tables = lookup_composition(ex, variant)
            assert len(ex.attention) == len(ex.target) + 1
            attended = [ex.source[i] for i in ex.attention]
            assert attended == [inp, *tables, "."]


def test_attention_formulas() -> None:
    for ex in splits("long")["train"][:200]:
        assert ex.attention == tuple(range(len(ex.source)))
    for ex in splits("reversed")["train"][:200]:
        k = len(ex.target) - 1
        assert ex.attention == (*range(k, -1, -1), k + 1)
    for ex in splits("noisy")["train"][:200]:
        m, k = ex.source.index("!") - 1, len(ex.target) - 1
        assert ex.attention == (0, *range(m + 2, m + k + 3))
        assert ex.attention[-1] == len(ex.source) - 1


# The paper's illustrative tables (Tables 1–2) have t1(000) = t1(110) = 110, so they are not
# bijections; these checks therefore use hand-written partial tables.
PAPER_TABLES = {
    "t1": {"000": "110", "110": "110"},
    "t2": {"110": "100"},
    **{f"t{i}": {} for i in range(3, 7)},
}


@pytest.mark.parametrize(
    ("inp", "tables", "source", "target", "attention"),
    [  # Table 1, rows 1–4
        ("000", ["t1"], "000 t1 .", "000 110", "0 1 2"),
        ("110", ["t1"], "110 t1 .", "110 110", "0 1 2"),
        ("110", ["t2"], "110 t2 .", "110 100", "0 1 2"),
        ("000", ["t1", "t1", "t2"], "000 t1 t1 t2 .", "000 110 110 100", "0 1 2 3 4"),
    ],
)
def test_table_1_examples(inp, tables, source, target, attention) -> None:
    ex = lookup_example("long", inp, tables, PAPER_TABLES)
    assert ex == Seq2SeqExample(
        tuple(source.split()), tuple(target.split()), tuple(map(int, attention.split()))
    )


def test_reversed_example_of_section_6_1_2() -> None:
    ex = lookup_example("reversed", "000", ["t1", "t1", "t2"], PAPER_TABLES)
    assert ex.source == ("t2", "t1", "t1", "000", ".")
    assert ex.target == ("000", "110", "110", "100")
    assert ex.attention == (3, 2, 1, 0, 4)


@pytest.mark.parametrize(
    ("inp", "noise", "tables", "source", "target", "paper_attention", "ours"),
    [  # Table 2, rows 1–4
        ("000", ["t2"], ["t1"], "000 t2 ! t1 .", "000 110", "0 2 3 4", "0 3 4"),
        ("110", ["t5", "t3", "t1"], ["t1"], "110 t5 t3 t1 ! t1 .", "110 110", "0 4 5 6", "0 5 6"),
        ("110", [], ["t2"], "110 ! t2 .", "110 100", "0 2 3", "0 2 3"),
        (
            "000",
            ["t6", "t3"],
            ["t1", "t1", "t2"],
            "000 t6 t3 ! t1 t1 t2 .",
            "000 110 110 100",
            "0 3 4 5 6 7",
            "0 4 5 6 7",
        ),
    ],
)
def test_table_2_examples(inp, noise, tables, source, target, paper_attention, ours) -> None:
    ex = lookup_example("noisy", inp, tables, PAPER_TABLES, noise=noise)
    assert ex.source == tuple(source.split())
    assert ex.target == tuple(target.split())
    assert ex.attention == tuple(map(int, ours.split()))
    # Table 2 is inconsistent: rows with noise list len(target) + 2 indices, inserting the
    # position of "!" (m + 1) after the 0. We keep one index per target token plus <eos>, as in
    # Table 1, §6.1.2 and the row without noise; removing "!" from the paper's list gives ours.
    start = ex.source.index("!")
    paper = [int(i) for i in paper_attention.split()]
    assert [i for i in paper if i != start] == list(ex.attention)


def test_noise_counts_cover_0_to_10_roughly_uniformly() -> None:
    for name, examples in splits("noisy").items():
        counts = Counter(ex.source.index("!") - 1 for ex in examples)
        assert set(counts) == set(range(11)), name
        if name == "train":
            expected = len(examples) / 11
            assert all(abs(c - expected) < 0.25 * expected for c in counts.values()), counts


def test_max_noise_tables_is_configurable() -> None:
    spec = LookupTablesSpec(variant="noisy", max_noise_tables=2, long_levels=1, long_size=100)
    counts = Counter(ex.source.index("!") - 1 for ex in generate_lookup_tables(spec)["train"])
    assert set(counts) == {0, 1, 2}


# ---- determinism ---------------------------------------------------------------------------------


def test_same_spec_same_output_and_different_seed_different_tables() -> None:
    spec = LookupTablesSpec(variant="noisy")
    assert generate_lookup_tables(spec) == splits("noisy")
    assert lookup_table_functions(spec) == lookup_table_functions(LookupTablesSpec(variant="long"))
    other = LookupTablesSpec(variant="noisy", seed=1, long_levels=1, long_size=500)
    assert lookup_table_functions(other) != lookup_table_functions(spec)
    other_data = generate_lookup_tables(other)
    for name in ("train", "validation", "interpolation", "long1"):
        assert other_data[name] != splits("noisy")[name]


def test_tables_are_distinct_bijections() -> None:
    functions = lookup_table_functions(LookupTablesSpec(seed=3))
    bits = [format(i, "03b") for i in range(8)]
    assert list(functions) == [f"t{i}" for i in range(1, 7)]
    for table in functions.values():
        assert sorted(table) == bits and sorted(table.values()) == bits
    assert len({tuple(t.values()) for t in functions.values()}) == 6


def test_split_sizes_do_not_change_the_tables_or_long_splits() -> None:
    small = generate_lookup_tables(LookupTablesSpec(validation_size=10, interpolation_size=20))
    assert small["long3"] == splits("long")["long3"]
    assert len(small["train"]) == 12_432 - 30


def test_output_independent_of_process_and_hash_seed() -> None:
    spec = dict(variant="noisy", seed=5, long_levels=2, long_size=300)
    # The generator needs no torch; stub it in the child to skip its slow import, unless the
    # package's import chain turns out to use it.
    code = (
        "import hashlib, sys, types\n"
        "sys.modules['torch'] = types.ModuleType('torch')\n"
        "try:\n"
        "    import attnlab.tasks.lookup\n"
        "except Exception:\n"
        "    for name in [m for m in sys.modules if m == 'torch' or m.startswith('attnlab')]:\n"
        "        del sys.modules[name]\n"
        "from attnlab.tasks.lookup import LookupTablesSpec, generate_lookup_tables as g\n"
        f"d = g(LookupTablesSpec(**{spec!r}))\n"
        "t = repr(sorted((k, [(e.source, e.target, e.attention) for e in v]) for k, v in d.items()))\n"
        "print(hashlib.sha256(t.encode()).hexdigest())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == digest(generate_lookup_tables(LookupTablesSpec(**spec)))


# ---- other configurations and validation -----------------------------------------------------------


def test_small_configuration() -> None:
    spec = LookupTablesSpec(
        n_tables=2,
        n_bits=2,
        train_max_tables=2,
        interpolation_size=4,
        validation_size=2,
        long_levels=2,
        long_size=32,
    )
    data = generate_lookup_tables(spec)
    assert spec.pool_size == 4 * (2 + 4)
    assert {k: len(v) for k, v in data.items()} == {
        "train": 18,
        "validation": 2,
        "interpolation": 4,
        "long1": 32,
        "long2": 32,
    }
    assert all(len(ex.source[0]) == 2 for ex in data["train"])
    assert set(compositions_of(data["long1"])) == {
        (inp, *ts) for inp in ("00", "01", "10", "11") for ts in product(("t1", "t2"), repeat=3)
    }


def compositions_of(examples: list[Seq2SeqExample]) -> list[tuple[str, ...]]:
    return [lookup_composition(ex, "long") for ex in examples]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variant": "sorted"}, "variant must be one of"),
        ({"seed": 1.5}, "seed must be an int"),
        ({"seed": True}, "seed must be an int"),
        ({"n_tables": 0}, "n_tables must be an int >= 1, got 0"),
        ({"validation_size": -1}, "validation_size must be an int >= 0, got -1"),
        ({"interpolation_size": 20_000}, "exceeds the 12,384 pairs with 2..4 tables that exist"),
        ({"validation_size": 9_385}, "exceeds the 9,384 pairs"),
        ({"long_size": 70_000}, "exceeds the 62,208 pairs with 5 tables"),
        (
            {"n_bits": 1, "n_tables": 3, "interpolation_size": 0, "validation_size": 0, "long_size": 1},
            "only 2 bijections exist",
        ),
        ({"train_max_tables": 9}, "at most 2,000,000 are supported"),
    ],
)
def test_invalid_specs_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LookupTablesSpec(**kwargs)


def test_lookup_example_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown table 't9'"):
        lookup_example("long", "000", ["t9"], PAPER_TABLES)
    with pytest.raises(ValueError, match="only used by the 'noisy' variant"):
        lookup_example("long", "000", ["t1"], PAPER_TABLES, noise=["t2"])
    with pytest.raises(ValueError, match="at least one table"):
        lookup_example("long", "000", [], PAPER_TABLES)
