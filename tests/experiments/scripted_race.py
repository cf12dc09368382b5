"""Helpers of the learning-rate race's tests (``test_race.py``, ``test_raffel2015_recipe.py``): a
scripted stand-in for ``train_or_resume`` and what a race left on disk."""

import json


def scripted_trainer(accuracies_by_rate, calls):
    """A stand-in for ``train_or_resume`` that continues a run along a fixed accuracy curve per
    learning rate, stopping at the config's target accuracy like the trainer, and records what
    each call was asked for."""

    def train(config, run_dir):
        rate, target = config["training"]["learning_rate"], config["training"]["epochs"]
        goal = config["training"]["stop_at_accuracy"]
        calls.append((rate, target))
        metrics = run_dir / "metrics.jsonl"
        done = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
        curve = accuracies_by_rate[rate]
        while len(done) < target and not (done and done[-1]["valid/accuracy"] >= goal):
            done.append({"epoch": len(done) + 1, "valid/accuracy": curve[len(done)]})
        (run_dir / "eval").mkdir(parents=True, exist_ok=True)
        metrics.write_text("".join(json.dumps(record) + "\n" for record in done))
        (run_dir / "eval" / "summary.json").write_text("{}")
        return {}

    return train


def write_run(cell_dir, learning_rate, accuracies, accuracy_key="valid/accuracy"):
    """A finished run; ``accuracy_key="validation_accuracy"``: as versions before issue 24 wrote it."""
    run = cell_dir / f"lr{learning_rate:g}" / "seed0"
    (run / "eval").mkdir(parents=True)
    records = [{"epoch": i + 1, accuracy_key: a, "seconds": 30.0} for i, a in enumerate(accuracies)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (run / "eval" / "summary.json").write_text(json.dumps({"test": {"accuracy": accuracies[-1]}}))


def epochs_logged(cell_dir, seed=0):
    """Learning rate → the epochs its run has logged."""
    return {
        float(run.parent.name[2:]): len(run.joinpath("metrics.jsonl").read_text().splitlines())
        for run in sorted(cell_dir.glob("lr*/seed*"))
        if run.name == f"seed{seed}"
    }


UNSOLVED = {  # a greyed-out cell: no rate reaches 100%
    1e-2: [60.0] * 100,
    3e-3: [70.0] * 5 + [65.0] * 95,  # second after round 1, worse than lr 0.0003 within round 2
    1e-3: [40.0] * 100,
    3e-4: [65.0] * 5 + [90.0] * 95,  # starts second-best, best from epoch 6 on
}
