"""Suite-wide settings and fixtures: one torch thread per test process (pytest-xdist runs one
process per core); one local Ray instance per test process, shared by the tests that need it."""

import pytest
import torch

torch.set_num_threads(1)


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
