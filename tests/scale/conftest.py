"""A local Ray instance (2 CPUs) shared by the tests of one module; skipped without the
``qmdlab[scale]`` extra locally, a failure under CI (tests/conftest.py ``require``)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_local(require):
    ray = require.module("ray", "the Ray tests need the scale extra: pip install 'qmdlab[scale]'")
    require.module("ray.data", "the Ray tests need Ray Data: pip install 'qmdlab[scale]'")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()
