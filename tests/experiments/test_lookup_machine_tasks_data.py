"""The Lookup experiment on machine-tasks-protocol data: generated (data.protocol) and from files."""

import json

import pytest

from attnlab.cli import main
from attnlab.config import ConfigError
from attnlab.experiments.lookup import experiment as lookup
from attnlab.experiments.registry import resolve_config
from attnlab.tasks import lookup_data
from attnlab.tasks.lookup_machine_tasks import MachineTasksLookupSpec, write_machine_tasks_lookup

# A small instance of the protocol: 4 inputs, t1-t3 trained, t4 held out, up to 3 tables in training.
SMALL = {
    "n_repeats": 2,
    "n_unary_tables": 4,
    "n_heldout_tables": 1,
    "max_composition_train": 3,
    "n_heldout_compositions": 2,
    "n_heldout_inputs": 1,
    "n_longer": 1,
    "bound_test": 40,
}
TEST_SETS = [
    "heldout_inputs",
    "heldout_compositions",
    "heldout_tables",
    "new_compositions",
    "longer_seen_1",
    "longer_incremental_1",
    "longer_new_1",
]
TINY_MODEL = [
    "model.attender=scaled_dot",
    "model.embedding_dim=8",
    "model.hidden_dim=16",
    "training.epochs=1",
    "training.batch_size=32",
    "training.progress=false",
]


def _small_overrides(variant: str = "noisy-multi") -> list[str]:
    section = "{" + ", ".join(f"{key}: {value}" for key, value in SMALL.items()) + "}"
    return ["data.protocol=machine_tasks", f"data.variant={variant}", f"data.machine_tasks={section}"]


def test_generated_protocol_splits_and_test_sets() -> None:
    config = lookup.EXPERIMENT.parse_config(resolve_config("lookup", _small_overrides()))
    splits = lookup_data.load_splits(config.data)
    assert list(splits) == ["train", "validation", *TEST_SETS]
    assert lookup_data.test_set_names(config.data) == TEST_SETS
    # 16 unary rows + 9 two-table compositions x 4 inputs + (27 - 2) x 3; ceil(5%) validate.
    assert (len(splits["train"]), len(splits["validation"])) == (16 + 36 + 75 - 6, 6)
    default = lookup.EXPERIMENT.parse_config(resolve_config("lookup", []))
    assert default.data.protocol == "attnlab"
    assert lookup_data.test_set_names(default.data) == ["interpolation", *(f"long{i}" for i in range(1, 6))]


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (["data.protocol=machine_tasks", "data.variant=noisy"], "data.variant='noisy'"),
        (["data.variant=noisy-single"], "data.protocol=attnlab"),
        (["data.protocol=machine"], "config.data.protocol"),
    ],
)
def test_variant_must_belong_to_the_protocol(overrides: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        lookup.EXPERIMENT.parse_config(resolve_config("lookup", overrides))


def test_impossible_generation_arguments_name_the_key() -> None:
    overrides = ["data.protocol=machine_tasks", "data.machine_tasks={n_heldout_compositions: 1296}"]
    config = lookup.EXPERIMENT.parse_config(resolve_config("lookup", overrides))
    with pytest.raises(ConfigError, match="data.machine_tasks: n_heldout_compositions=1296"):
        lookup_data.load_splits(config.data)


def test_one_epoch_on_generated_machine_tasks_data(tmp_path) -> None:
    config = lookup.EXPERIMENT.parse_config(
        resolve_config("lookup", [*_small_overrides("intermediate-noise"), *TINY_MODEL])
    )
    results = lookup.EXPERIMENT.train(config, tmp_path / "run")
    assert list(results) == TEST_SETS
    assert results["new_compositions"]["examples"] == 1**3 * 4  # t4 t4 t4 on the 4 inputs
    assert results["longer_seen_1"]["examples"] == 40


def test_one_epoch_from_written_files(tmp_path, capsys) -> None:
    files = tmp_path / "data"
    write_machine_tasks_lookup(MachineTasksLookupSpec(variant="reversed", seed=3, **SMALL), files)
    tests = "{" + ", ".join(f"{name}: {files / name}.tsv" for name in TEST_SETS) + "}"
    argv = [
        "train",
        "lookup",
        f"data.train_file={files / 'train.tsv'}",
        f"data.validation_file={files / 'validation.tsv'}",
        f"data.test_files={tests}",
        *TINY_MODEL,
        "--run-dir",
        str(tmp_path / "run"),
    ]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "run" / "eval" / "summary.json").read_text())
    assert list(summary) == TEST_SETS
    assert summary["heldout_compositions"]["examples"] == 2 * 4
