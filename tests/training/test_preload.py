"""The CPU recipe imports every module it can reach before its first stage, under the names the
stages import them by: a module first imported an hour into a run would come from whatever the
working tree holds then."""

import sys

from qmdlab.training.cpu_run import preload


def test_preload_imports_the_installed_package_names():
    preload()
    for name in (
        "qmdlab.eval.record",
        "qmdlab.eval.metrics",
        "qmdlab.training.evaluate",
        "qmdlab.training.grpo",
        "qmdlab.training.export",
        "qmdlab.pipeline.lab",
    ):
        assert name in sys.modules, name
