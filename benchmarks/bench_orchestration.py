"""attnlab's runner against Ray Tune, measured on the Raffel recipe's learning-rate race (issue 24).

Issue 24 asks whether a well-kept orchestration library should replace the runner, in particular Ray
Tune, whose schedulers include successive halving (ASHA), which the Raffel recipe's race resembles.
This script runs the same cell both ways, side by side in one process, and prints what a user pays
and gets:

* **attnlab**: ``attnlab reproduce raffel2015`` for one cell (``reproduce``), the exact race;
* **Ray Tune**: a ``Tuner`` over the same learning rates whose trainable makes the same training
  calls (``train_or_resume`` to the race's round budgets, reporting once per round), scheduled by
  ``ASHAScheduler`` (grace period 1 round, reduction factor 2) with ``--tune-cpus`` trials at once.

Printed per setting: wall time, the epochs each learning rate was trained to (the scheduler's
decisions), and the cell's result; for Tune also the time to start Ray and the extra packages
``ray[tune]`` needs.

Needs ``pip install "ray[tune]"`` (not an attnlab dependency). The cell is deliberately tiny
(``--quick`` training: 20 updates an epoch), so that what is measured is the orchestration, not the
training. Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_orchestration.py --out /tmp/bench_orchestration
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from attnlab.experiments import race as races
from attnlab.experiments.memory import recipe
from attnlab.experiments.registry import train_or_resume
from attnlab.metric_names import read_metrics

CELL = recipe.Cell("addition", 50, "attention")


def epochs_trained(cell_dir: Path, seed: int = 0) -> dict[str, int]:
    """Epochs each learning rate's run has trained (its ``metrics.jsonl``), by folder name."""
    found = {}
    for lr_dir in sorted(cell_dir.glob("lr*")):
        metrics = lr_dir / f"seed{seed}" / "metrics.jsonl"
        found[lr_dir.name] = len(read_metrics(metrics)) if metrics.is_file() else 0
    return found


def run_attnlab(out: Path, max_epochs: int) -> dict[str, Any]:
    start = time.perf_counter()
    recipe.reproduce(
        out,
        problems=["addition"],
        t0s=[50],
        poolings=["attention"],
        variable=False,
        max_epochs=max_epochs,
        quick=True,
    )
    seconds = time.perf_counter() - start
    result = recipe.best_result(CELL.path(out))
    return {
        "seconds": seconds,
        "epochs_trained": epochs_trained(CELL.path(out)),
        "result": None if result is None else result.table_cell(),
    }


def tune_trainable(config: dict[str, Any]) -> None:
    """One learning rate of the race as a Tune trial: the race's rounds, one report per round."""
    from ray import tune

    spec = recipe.cell_race(CELL, Path(config["out"]), config["max_epochs"], quick=True)
    run_dir = races.run_dir(spec.cell_dir, config["learning_rate"])
    for budget in races.race_budgets(config["max_epochs"]):
        train_or_resume(spec.run_config(config["learning_rate"], budget), run_dir)
        history = read_metrics(run_dir / "metrics.jsonl")
        reached = races.epochs_to_goal(history, spec.goal, spec.metric)
        tune.report({"accuracy": max(r[spec.metric] for r in history), "epochs": len(history)})
        if reached is not None:
            return


def run_tune(out: Path, max_epochs: int, cpus: int) -> dict[str, Any]:
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    start = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    started = time.perf_counter() - start
    trainable = tune.with_resources(tune_trainable, {"cpu": 1})
    scheduler = ASHAScheduler(
        time_attr="training_iteration",
        metric="accuracy",
        mode="max",
        max_t=len(races.race_budgets(max_epochs)),
        grace_period=1,
        reduction_factor=2,
    )
    space = {
        "learning_rate": tune.grid_search(list(recipe.LEARNING_RATES)),
        "out": str(out),
        "max_epochs": max_epochs,
    }
    tuner = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(scheduler=scheduler),
        run_config=tune.RunConfig(name="race", storage_path=str(out / "tune"), verbose=0),
    )
    tuner.fit()
    ray.shutdown()
    seconds = time.perf_counter() - start
    result = recipe.best_result(CELL.path(out))
    return {
        "seconds": seconds,
        "ray_start_seconds": started,
        "epochs_trained": epochs_trained(CELL.path(out)),
        "result": None if result is None else result.table_cell(),
    }


def extra_packages() -> dict[str, str]:
    """The packages ``ray[tune]`` adds to attnlab's own (pandas, pyarrow, …) and their versions."""
    found = {}
    for name in ("pandas", "pyarrow", "tensorboardX", "fsspec", "requests"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="scratch folder (emptied first)")
    parser.add_argument("--max-epochs", type=int, default=20, help="the race's cap (paper: 100)")
    parser.add_argument("--tune-cpus", type=int, default=2, help="Ray CPUs = trials at once")
    args = parser.parse_args()
    try:
        import ray.tune  # noqa: F401
    except ImportError as error:
        raise SystemExit(f'bench_orchestration: needs Ray Tune (pip install "ray[tune]"): {error}') from None
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    report: dict[str, Any] = {
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "cell": CELL.path(Path(".")).as_posix(),
    }
    report["attnlab"] = run_attnlab(out / "attnlab", args.max_epochs)
    report["tune"] = run_tune(out / "tune_runs", args.max_epochs, args.tune_cpus)
    report["tune_extra_packages"] = extra_packages()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
