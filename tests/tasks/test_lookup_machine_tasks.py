"""The machine-tasks LongLookupTables protocol: counts, disjointness, noise rules, TSV round trip."""

from __future__ import annotations

import math
from collections import Counter
from functools import cache
from itertools import product

import pytest

from attnlab.cli import main
from attnlab.tasks.examples import Seq2SeqExample
from attnlab.tasks.lookup_machine_tasks import (
    MACHINE_TASKS_VARIANTS,
    MachineTasksLookupSpec,
    generate_machine_tasks_lookup,
    machine_tasks_composition,
    machine_tasks_table_functions,
    machine_tasks_test_set_names,
    write_machine_tasks_lookup,
)
from attnlab.tasks.tsv import read_tsv

TRAIN_TABLES = {f"t{i}" for i in range(1, 7)}
HELDOUT_TABLES = {"t7", "t8"}
INPUTS = [format(i, "03b") for i in range(8)]
LONGER = [f"longer_{family}_{i}" for family in ("seen", "incremental", "new") for i in range(1, 6)]
TEST_SETS = ["heldout_inputs", "heldout_compositions", "heldout_tables", "new_compositions", *LONGER]


@cache
def splits(variant: str) -> dict[str, list[Seq2SeqExample]]:
    """The files of ``variant`` with the published arguments (seed 123), generated once."""
    return generate_machine_tasks_lookup(MachineTasksLookupSpec(variant=variant))


@cache
def compositions(variant: str, name: str) -> tuple[tuple[str, ...], ...]:
    return tuple(machine_tasks_composition(row, variant) for row in splits(variant)[name])


def tables_of(composition: tuple[str, ...]) -> tuple[str, ...]:
    return composition[1:]


# ---- counts -----------------------------------------------------------------------------------


def test_counts_with_the_published_arguments() -> None:
    # 2 tables of 6 with order: 36; 3: 216; 4: 1296, less 50 held-out compositions and 2 held-out
    # inputs of each of the 1,246 others; 5% of the compositions (ceil) validate; 64 unary rows.
    composition_rows = 8 * 36 + 8 * 216 + (1296 - 50) * (8 - 2)
    assert composition_rows == 9492
    validation = math.ceil(0.05 * composition_rows)
    assert validation == 475
    assert 8 * 8 + composition_rows - validation == 9081
    spec = MachineTasksLookupSpec()
    assert (spec.n_composition_rows, spec.n_validation) == (9492, 475)

    sizes = {name: len(rows) for name, rows in splits("long").items()}
    assert (
        list(sizes)
        == ["train", "validation", *TEST_SETS]
        == ["train", "validation"] + (machine_tasks_test_set_names(5))
    )
    assert sizes == {
        "train": 9081,
        "validation": 475,
        "heldout_inputs": 2 * 1246,
        "heldout_compositions": 50 * 8,
        "heldout_tables": 5000,  # cut from 4 positions x 2 held-out tables x 6**3 x 8 inputs
        "new_compositions": 2**4 * 8,
        **{f"longer_seen_{i}": 5000 for i in range(1, 6)},
        **{f"longer_incremental_{i}": 5000 for i in range(1, 6)},
        **{f"longer_new_{i}": 128 * 2**i for i in range(1, 6)},
    }


@pytest.mark.parametrize("variant", MACHINE_TASKS_VARIANTS)
def test_every_variant_has_the_same_compositions(variant: str) -> None:
    """The variants differ in layout and noise only: row i of a file is the same composition."""
    for name in splits("long"):
        assert compositions(variant, name) == compositions("long", name), name


def test_lengths_and_stratified_validation() -> None:
    lengths = Counter(len(c) - 1 for c in compositions("long", "validation"))
    # 475 split in proportion to 288 / 1728 / 7476 rows (largest remainders).
    assert lengths == {2: 14, 3: 87, 4: 374}
    # Within a length, rows spread over the compositions: none gives two validation rows here.
    per_composition = Counter(tables_of(c) for c in compositions("long", "validation"))
    assert max(per_composition.values()) == 1
    train_lengths = Counter(len(c) - 1 for c in compositions("long", "train"))
    assert train_lengths == {1: 64, 2: 288 - 14, 3: 1728 - 87, 4: 1246 * 6 - 374}


# ---- disjointness -----------------------------------------------------------------------------


def test_training_rows_follow_the_protocol() -> None:
    train = set(compositions("long", "train"))
    validation = set(compositions("long", "validation"))
    assert len(train) == 9081 and len(validation) == 475, "duplicate rows"
    assert not train & validation
    # Every table, held-out ones included, on every input alone; held-out tables only so.
    unary = {c for c in train if len(c) == 2}
    assert unary == {(x, f"t{t}") for t in range(1, 9) for x in INPUTS}
    for composition in train | validation:
        if len(composition) > 2:
            assert set(tables_of(composition)) <= TRAIN_TABLES, composition
    # Every composition of 2 and 3 training tables is there on every input.
    for k in (2, 3):
        expected = {(x, *t) for t in product(sorted(TRAIN_TABLES), repeat=k) for x in INPUTS}
        assert {c for c in train | validation if len(c) == k + 1} == expected


def test_heldout_compositions_and_inputs() -> None:
    seen = set(compositions("long", "train")) | set(compositions("long", "validation"))
    seen_tables = Counter(tables_of(c) for c in seen)
    held = Counter(tables_of(c) for c in compositions("long", "heldout_compositions"))
    assert len(held) == 50 and set(held.values()) == {8}
    assert all(len(t) == 4 and set(t) <= TRAIN_TABLES for t in held)
    assert not set(held) & set(seen_tables), "a held-out composition is trained on"
    heldout_inputs = compositions("long", "heldout_inputs")
    per_composition = Counter(tables_of(c) for c in heldout_inputs)
    assert len(per_composition) == 1296 - 50 and set(per_composition.values()) == {2}
    assert not set(per_composition) & set(held)
    for tables, count in per_composition.items():
        assert seen_tables[tables] == 8 - count  # the other 6 inputs are in train or validation


def test_test_sets_with_heldout_tables() -> None:
    for composition in compositions("long", "heldout_tables"):
        assert len(composition) == 5
        assert sum(t in HELDOUT_TABLES for t in tables_of(composition)) == 1, composition
    new = set(compositions("long", "new_compositions"))
    assert new == {(x, *t) for t in product(sorted(HELDOUT_TABLES), repeat=4) for x in INPUTS}


def test_longer_levels_prepend_a_table_to_the_previous_level() -> None:
    bases = {
        "seen": {c for c in compositions("long", "train") if len(c) == 5},
        "incremental": set(compositions("long", "heldout_tables")),
        "new": set(compositions("long", "new_compositions")),
    }
    for family, previous in bases.items():
        for i in range(1, 6):
            level = compositions("long", f"longer_{family}_{i}")
            assert len(set(level)) == len(level)
            for composition in level:
                assert len(composition) == 4 + i + 1
                held = sum(t in HELDOUT_TABLES for t in tables_of(composition))
                assert held == {"seen": 0, "incremental": 1, "new": 4 + i}[family], composition
                # Dropping the prepended (first) table gives a row of the previous (cut) level.
                assert (composition[0], *composition[2:]) in previous, (family, i, composition)
            previous = set(level)


def test_no_test_row_is_trained_or_validated_on_and_test_sets_are_disjoint() -> None:
    seen = set(compositions("long", "train")) | set(compositions("long", "validation"))
    owner: dict[tuple[str, ...], str] = {}
    for name in TEST_SETS:
        rows = compositions("long", name)
        assert len(set(rows)) == len(rows), f"duplicates in {name}"
        assert not seen & set(rows), name
        for row in rows:
            assert owner.setdefault(row, name) == name, f"{row} in {owner[row]} and {name}"


# ---- rows, attention and noise ----------------------------------------------------------------


@pytest.mark.parametrize("variant", MACHINE_TASKS_VARIANTS)
def test_targets_and_gold_attention(variant: str) -> None:
    functions = machine_tasks_table_functions(MachineTasksLookupSpec(variant=variant))
    assert sorted(functions) == [f"t{i}" for i in range(1, 9)]
    for name, rows in splits(variant).items():
        for row, composition in zip(rows, compositions(variant, name)):
            expected = [composition[0]]
            for table in tables_of(composition):
                expected.append(functions[table][expected[-1]])
            assert row.target == tuple(expected), (name, row)
            attended = [row.source[i] for i in row.attention]
            assert attended == [composition[0], *tables_of(composition), "."], (name, row)
            # Each target token attends the real table that produced it, in order.
            if variant != "reversed":
                assert list(row.attention) == sorted(row.attention)


def test_reversed_layout() -> None:
    for long_row, row in zip(splits("long")["heldout_tables"], splits("reversed")["heldout_tables"]):
        assert row.source == (*reversed(long_row.source[:-1]), ".")
        assert row.target == long_row.target
        k = len(row.target) - 1
        assert row.attention == (*range(k, -1, -1), k + 1)


@pytest.mark.parametrize("variant", ["noisy-single", "noisy-multi"])
def test_noisy_start(variant: str) -> None:
    counts: Counter[int] = Counter()
    multiple_starts = 0
    for name, rows in splits(variant).items():
        for row, composition in zip(rows, compositions(variant, name)):
            source = row.source
            k = len(composition) - 1
            assert source[0] == composition[0] and source[-k - 2] == "!"
            noise = source[1 : -k - 2]
            counts[len(noise)] += 1
            assert 0 <= len(noise) <= 9
            allowed = TRAIN_TABLES | ({"!"} if variant == "noisy-multi" else set())
            assert set(noise) <= allowed, row
            multiple_starts += "!" in noise
            assert row.attention == (0, *range(len(noise) + 2, len(source))), row
    assert set(counts) == set(range(10)), "m ~ U{0..9}"
    if variant == "noisy-multi":
        assert multiple_starts > 1000
    else:
        assert multiple_starts == 0


def test_intermediate_noise() -> None:
    for name, rows in splits("intermediate-noise").items():
        for row, composition in zip(rows, compositions("intermediate-noise", name)):
            k = len(composition) - 1
            assert len(row.source) == 2 * k + 2 and row.source[-1] == "."
            assert row.source[0:-1:2] == composition  # input n_1 t_1 n_2 t_2 ... n_k t_k .
            noise = row.source[1:-1:2]
            assert len(noise) == k and set(noise) <= TRAIN_TABLES, row
            assert row.attention == (0, *range(2, 2 * k + 1, 2), 2 * k + 1)


# ---- determinism, files, errors ---------------------------------------------------------------


def test_seeded() -> None:
    small = {"bound_test": 20, "n_longer": 1}
    first = generate_machine_tasks_lookup(MachineTasksLookupSpec(variant="noisy-multi", seed=5, **small))
    again = generate_machine_tasks_lookup(MachineTasksLookupSpec(variant="noisy-multi", seed=5, **small))
    other = generate_machine_tasks_lookup(MachineTasksLookupSpec(variant="noisy-multi", seed=6, **small))
    assert first == again
    assert first["train"] != other["train"]
    assert machine_tasks_table_functions(MachineTasksLookupSpec(seed=5)) != machine_tasks_table_functions(
        MachineTasksLookupSpec(seed=6)
    )


@pytest.mark.parametrize("variant", MACHINE_TASKS_VARIANTS)
def test_files_round_trip_through_the_tsv_reader(variant: str, tmp_path) -> None:
    spec = MachineTasksLookupSpec(variant=variant, seed=1, bound_test=30, n_longer=2)
    written = write_machine_tasks_lookup(spec, tmp_path)
    generated = generate_machine_tasks_lookup(spec)
    assert [path.name for path in written] == [f"{name}.tsv" for name in generated]
    for path, count in written.items():
        assert read_tsv(path) == generated[path.stem] and count == len(generated[path.stem])
    arguments = dict(
        line.split(" ", 1) for line in (tmp_path / "generation_arguments.txt").read_text().splitlines()
    )
    assert arguments["variant"] == variant and arguments["seed"] == "1" and arguments["bound_test"] == "30"
    assert arguments["alphabet"] == "{0, 1}" and arguments["eos"] == "."


def test_cli_writes_the_files(tmp_path, capsys) -> None:
    out = tmp_path / "x"
    assert (
        main(
            [
                "data",
                "--protocol",
                "machine_tasks",
                "--variant",
                "noisy-single",
                "--seed",
                "7",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    names = sorted(path.name for path in out.iterdir())
    assert names == sorted(
        ["generation_arguments.txt", *(f"{n}.tsv" for n in ["train", "validation", *TEST_SETS])]
    )
    assert len(read_tsv(out / "train.tsv")) == 9081
    assert "train.tsv: 9081 examples" in capsys.readouterr().out
    assert main(["data", "--protocol", "machine_tasks", "--variant", "noisy", "--out", str(out)]) == 2
    assert "--variant noisy is not a variant of --protocol machine_tasks" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("arguments", "key"),
    [
        ({"variant": "noisy"}, "variant"),
        ({"n_heldout_compositions": 1296}, "n_heldout_compositions"),
        ({"n_heldout_inputs": 8}, "n_heldout_inputs"),
        ({"n_heldout_tables": 8}, "n_heldout_tables"),
        ({"n_heldout_tables": 0}, "n_heldout_tables"),
        ({"validation_size": 1.0}, "validation_size"),
        ({"validation_size": 0}, "validation_size"),
        ({"max_composition_train": 1}, "max_composition_train"),
        ({"max_noise_tables": 0}, "max_noise_tables"),
        ({"n_unary_tables": 3, "alphabet": ("0",), "n_repeats": 1}, "n_unary_tables"),
        ({"alphabet": ("t", "1"), "n_repeats": 2}, "alphabet"),
        ({"max_composition_train": 9}, "max_composition_train"),
    ],
)
def test_impossible_arguments_name_the_argument(arguments: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        MachineTasksLookupSpec(**arguments)
