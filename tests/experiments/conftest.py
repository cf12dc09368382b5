from pathlib import Path

import pytest

from attnlab.tasks.lookup import LookupTablesSpec, generate_lookup_tables
from attnlab.tasks.tsv import write_tsv


@pytest.fixture(scope="session")
def lookup_files(tmp_path_factory) -> dict[str, Path]:
    """Small machine-tasks TSV files cut from generated Long Lookup Tables."""
    folder = tmp_path_factory.mktemp("lookup_tsv")
    splits = generate_lookup_tables(LookupTablesSpec(variant="long", seed=0, long_size=100))
    sizes = {"train": 400, "validation": 60, "interpolation": 60, "long1": 60}
    paths = {}
    for name, size in sizes.items():
        paths[name] = folder / f"{name}.tsv"
        write_tsv(paths[name], splits[name][:size])
    return paths


@pytest.fixture(scope="session")
def scan_files(make_scan_files) -> dict[str, Path]:
    """Small SCAN files: 120 training and 30 test commands of the whole grammar."""
    return make_scan_files("scan_transformer", 120, 30)


@pytest.fixture(scope="session")
def tiny_overrides(lookup_files):
    """``tiny_overrides(**extra)``: overrides for a fast run on ``lookup_files``."""
    return lambda **extra: _tiny_overrides(lookup_files, **extra)


def _tiny_overrides(files: dict[str, Path], **extra: object) -> list[str]:
    """Overrides for a fast run on ``lookup_files``."""
    overrides = {
        "data.train_file": files["train"],
        "data.validation_file": files["validation"],
        "data.test_files": "{" + ", ".join(f"{k}: {files[k]}" for k in ("interpolation", "long1")) + "}",
        "model.attender": "scaled_dot",
        "model.embedding_dim": 16,
        "model.hidden_dim": 32,
        "training.epochs": 3,
        "training.batch_size": 32,
        "training.progress": "false",
        **extra,
    }
    return [f"{key}={value}" for key, value in overrides.items()]
