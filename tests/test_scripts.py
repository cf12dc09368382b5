"""The shell scripts of ``scripts/`` that campaigns rely on."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli import main

REPOSITORY = Path(__file__).resolve().parents[1]
ATTNLAB = Path(sys.executable).parent / "attnlab"
needs_bash = pytest.mark.skipif(
    shutil.which("bash") is None or not ATTNLAB.exists(), reason="needs bash and the attnlab command"
)


def _epochs(run: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


@needs_bash
def test_epoch_budget_keeps_what_each_budget_would_have_given(tmp_path, tiny_memory_addition):
    overrides = [item for item in tiny_memory_addition if not item.startswith("training.epochs=")]
    run = tmp_path / "staged"
    script = str(REPOSITORY / "scripts" / "epoch_budget.sh")
    command = ["bash", script, str(run), "1 3", "memory_addition", *overrides]
    env = {"ATTNLAB": str(ATTNLAB), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    assert _epochs(run) == [1, 2, 3]
    assert _summary(run / "eval_at" / "epoch1") != _summary(run / "eval_at" / "epoch3")

    for budget in (1, 3):  # each stage equals a run trained with that budget from the start
        alone = tmp_path / f"alone{budget}"
        argv = ["train", "memory_addition", *overrides, f"training.epochs={budget}", "--run-dir", str(alone)]
        assert main(argv) == 0
        assert _summary(run / "eval_at" / f"epoch{budget}") == _summary(alone / "eval")

    # Started again, finished stages are skipped: nothing is retrained.
    before = (run / "metrics.jsonl").read_bytes()
    result = subprocess.run(command, check=True, env=env, capture_output=True, text=True)
    assert (run / "metrics.jsonl").read_bytes() == before and "budget" not in result.stdout
