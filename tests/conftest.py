"""Suite-wide settings and fixtures: one torch thread per test process (pytest-xdist runs one
process per core); one local Ray instance per test process, shared by the tests that need it;
the hypothesis profile of the property-based tests (fuzzed file readers)."""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

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
