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
