"""A Ray instance for the tests of one module: a new local one with 2 CPUs (what ``make test``
and CI use), or — with ``QMDLAB_TEST_RAY_ADDRESS`` set — an already running one (e.g. started
once with ``ray start --head --num-cpus 2`` on a machine too busy to start one per module).
Skipped without the ``qmdlab[scale]`` extra locally, a failure under CI (tests/conftest.py ``require``)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def ray_local(require):
    ray = require.module("ray", "the Ray tests need the scale extra: pip install 'qmdlab[scale]'")
    require.module("ray.data", "the Ray tests need Ray Data: pip install 'qmdlab[scale]'")
    if ray.is_initialized():
        ray.shutdown()
    address = os.environ.get("QMDLAB_TEST_RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    else:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()
