"""Checkpoints: written atomically, read with ``torch.load(weights_only=True)``.

A checkpoint is a plain dict of tensors and Python data:

* ``format``: ``CHECKPOINT_FORMAT``;
* ``model_spec``: everything needed to rebuild the model (its config and vocabularies); a
  checkpoint is only loaded into a model built from an equal spec;
* ``model``: the state dict; ``optimizer``: the optimizer's state dict (``last`` only);
* ``epoch``: the number of finished epochs; ``best_validation_loss``; ``history``: one metrics
  record per finished epoch, as in ``metrics.jsonl`` (checkpoints of earlier versions hold the
  legacy names, ``validation_loss``; readers map them, :func:`attnlab.metric_names.current_history`);
* ``rng``: the global torch (and CUDA) random states at the end of that epoch, so a resumed run
  draws the same dropout masks as an uninterrupted one.
* ``within_epoch`` (``last`` only, when written within an epoch, ``training.checkpoint_every``):
  ``updates`` done in the unfinished epoch, their ``loss_sum`` and the task's ``carried_state``;
  ``rng`` is then the state after that update.
"""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path
from typing import Any

import torch

from attnlab.io import atomic_save

CHECKPOINT_FORMAT = "attnlab-checkpoint-1"

KILL_IN_CHECKPOINT_WRITE = "ATTNLAB_TEST_KILL_IN_CHECKPOINT_WRITE"
"""Test hook of the crash-safety tests: with this environment variable set to ``N``, the process
kills itself with SIGKILL during its ``N``-th checkpoint write, after the temporary file is
written and before it replaces the checkpoint. Unset (always, outside those tests), it does nothing."""

_checkpoint_writes = itertools.count(1)


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable or belongs to another model."""


def save_checkpoint(path: str | Path, checkpoint: dict[str, Any]) -> None:
    """Write ``checkpoint`` (with its format tag) to ``path`` atomically."""
    atomic_save(path, lambda temporary: _write(temporary, {"format": CHECKPOINT_FORMAT, **checkpoint}))


def _write(temporary: Path, checkpoint: dict[str, Any]) -> None:
    torch.save(checkpoint, temporary)
    kill_at = os.environ.get(KILL_IN_CHECKPOINT_WRITE)
    if next(_checkpoint_writes) == int(kill_at or 0):
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path} is not a readable attnlab checkpoint: the file is empty")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unpickling failure means "not a checkpoint"
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{path} is not a readable attnlab checkpoint: {reason}") from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not an attnlab checkpoint (format {CHECKPOINT_FORMAT})")
    return checkpoint


def check_model_spec(path: str | Path, checkpoint: dict[str, Any], expected: dict[str, Any]) -> None:
    """Raise if the checkpoint was written for a model whose spec differs from ``expected``."""
    found = checkpoint.get("model_spec")
    if found == expected:
        return
    if not isinstance(found, dict):
        raise CheckpointError(f"{path} has no model spec; it was not written by this model")
    differences = sorted(key for key in set(found) | set(expected) if found.get(key) != expected.get(key))
    raise CheckpointError(
        f"{path} belongs to another model: its spec differs in {differences} "
        f"(checkpoint: { {key: found.get(key) for key in differences if key != 'vocabularies'} }, "
        f"expected: { {key: expected.get(key) for key in differences if key != 'vocabularies'} })"
    )


def load_system_checkpoint(
    path: str | Path,
    system: str,
    description: str,
    expected_model: dict[str, Any] | None = None,
    map_location: str | torch.device = "cpu",
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load a checkpoint written for ``system``; with ``expected_model``, its model config must match.

    Returns the checkpoint and its model spec.
    """
    checkpoint = load_checkpoint(path, map_location=map_location)
    spec = checkpoint.get("model_spec") or {}
    if spec.get("system") != system:
        raise CheckpointError(f"{path} is not a {description} checkpoint (system {spec.get('system')!r})")
    if expected_model is not None:
        check_model_spec(path, {"model_spec": spec["model"]}, expected_model)
    return checkpoint, spec


def load_model_weights(path: str | Path, model: torch.nn.Module, checkpoint: dict[str, Any]) -> None:
    try:
        model.load_state_dict(checkpoint["model"])
    except (KeyError, RuntimeError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise CheckpointError(f"{path}: weights do not fit the model: {first_line}") from None


def capture_rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
