"""Suite-wide settings and fixtures: one torch thread per test process (pytest-xdist runs one
process per core); one local Ray instance per test process, shared by the tests that need it;
the hypothesis profile of the property-based tests (fuzzed file readers); a scripted decoder for
tests of greedy decoding's stop rules; small SCAN files."""

import os
import random
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from attnlab.models.stepwise import StepwiseSeq2Seq
from attnlab.tasks.scan import generate_scan, write_scan_file

torch.set_num_threads(1)

# Property-based tests are deterministic (the same examples on every run, no example database), so
# a CI failure reproduces locally; no deadline (the machine is shared). ATTNLAB_HYPOTHESIS=explore
# draws fresh random examples, many more of them, for a longer local search.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "explore",
    deadline=None,
    max_examples=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("ATTNLAB_HYPOTHESIS", "ci"))


@pytest.fixture(scope="session")
def local_ray():
    """A local Ray instance (2 CPUs), started once: its workers stay warm for the next Ray test."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'attnlab[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def make_scan_files(tmp_path_factory) -> Callable[..., dict[str, Path]]:
    """``make_scan_files(name, train, test, without=())``: the SCAN grammar's commands without the
    words in ``without``, shuffled (seed 0), the first ``train`` and the last ``test`` written as
    ``train.txt`` / ``test.txt`` in a new folder; returns their paths by split."""

    def make(name: str, train: int, test: int, without: Iterable[str] = ()) -> dict[str, Path]:
        examples = [example for example in generate_scan() if not set(without) & set(example.source)]
        random.Random(0).shuffle(examples)
        folder = tmp_path_factory.mktemp(name)
        paths = {"train": folder / "train.txt", "test": folder / "test.txt"}
        write_scan_file(paths["train"], examples[:train])
        write_scan_file(paths["test"], examples[-test:])
        return paths

    return make


@pytest.fixture(scope="session")
def tiny_memory_addition() -> list[str]:
    """Overrides that make one ``memory_addition`` run take a fraction of a second (sweeps, reports)."""
    return [
        "data.t0=20",
        "data.test_size=50",
        "training.updates_per_epoch=5",
        "training.batch_size=20",
        "training.stop_at_accuracy=null",
        "model.hidden_dim=16",
        "training.epochs=1",
        "training.progress=false",
        "training.device=cpu",
    ]


class ScriptedDecoder(StepwiseSeq2Seq):
    """A decoder whose step ``i`` gives every row the probabilities ``probabilities[i]`` (token ids:
    0 pad, 1 start, 2 ``<eos>``, then the actions) and attention 1 on a one-word source."""

    def __init__(self, probabilities: torch.Tensor) -> None:
        super().__init__(1, probabilities.size(1), 0, 1, 2)  # a source vocabulary of <pad> alone
        self.log_probabilities = probabilities.log()

    def start(self, source: torch.Tensor, source_padding_mask: torch.Tensor) -> int:
        return 0

    def step(self, state: int, previous: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        rows = previous.size(0)
        return self.log_probabilities[state].expand(rows, -1), torch.ones(rows, 1), state + 1


@pytest.fixture
def scripted_decoder() -> type[ScriptedDecoder]:
    """:class:`ScriptedDecoder`, the class: ``scripted_decoder(probabilities)`` builds one."""
    return ScriptedDecoder
