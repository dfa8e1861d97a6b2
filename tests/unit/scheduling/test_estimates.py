"""Run times learned from history (``scheduling.estimates``): most specific key first."""

from __future__ import annotations

import pytest

from corral.core.job import JobSpec
from corral.core.resources import GpuKind, GpuRequest
from corral.scheduling.estimates import JobFeatures, RuntimePredictor


def features(
    user: str | None = "ann", name: str | None = "bert", command: str = "train.py", gpus: float = 1
) -> JobFeatures:
    return JobFeatures(user, name, command, gpus)


def test_nothing_known_predicts_nothing() -> None:
    assert RuntimePredictor().predict(features()) is None


@pytest.mark.parametrize(
    ("asked", "seconds", "basis"),
    [
        pytest.param(features(), 100.0, "user-command-gpus", id="same-user-command-shape"),
        pytest.param(features(gpus=8), 100.0, "user-command", id="other-shape"),
        pytest.param(features(command="eval.py"), 100.0, "user-name-gpus", id="same-name"),
        pytest.param(features(user="bob"), 900.0, "user-command-gpus", id="other-user"),
        pytest.param(features(user="cat", command="x.py", name=None), 500.0, "gpus", id="shape"),
        pytest.param(
            features(user="cat", command="x.py", name=None, gpus=3), 500.0, "all", id="everyone"
        ),
    ],
)
def test_most_specific_history_answers(asked: JobFeatures, seconds: float, basis: str) -> None:
    predictor = RuntimePredictor()
    predictor.observe(features(), 100.0)
    predictor.observe(features(user="bob"), 900.0)
    found = predictor.predict(asked)
    assert found is not None
    assert (found.seconds, found.basis) == (seconds, basis)


def test_median_resists_outliers_and_window_forgets() -> None:
    predictor = RuntimePredictor(window=3)
    for runtime in (60.0, 60.0, 7 * 86400.0):
        predictor.observe(features(), runtime)
    found = predictor.predict(features())
    assert found is not None and (found.seconds, found.samples) == (60.0, 3)
    for runtime in (3600.0, 3600.0):
        predictor.observe(features(), runtime)  # the oldest two fall out of the window
    found = predictor.predict(features())
    assert found is not None and found.seconds == 3600.0
    assert "median of 3 finished jobs" in found.describe()


def test_numbered_names_and_trace_commands_are_not_keys() -> None:
    spec = JobSpec(command="trace:job-17", name="job-17", gpus=GpuRequest(GpuKind.WHOLE, count=2))
    got = JobFeatures.of(spec, "ann")
    assert (got.name, got.command, got.gpus) == (None, None, 2.0)
    kept = JobFeatures.of(JobSpec(command=("python", "train.py"), name="resnet50"), None)
    assert (kept.name, kept.command) == ("resnet50", "python train.py")


def test_non_positive_runtimes_are_ignored() -> None:
    predictor = RuntimePredictor()
    predictor.observe(features(), 0.0)
    assert predictor.predict(features()) is None and predictor.observed == 0
