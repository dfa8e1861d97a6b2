"""The readers' shared rules: how a GPU count becomes a gang, and GPU model lists as globs."""

from __future__ import annotations

import pytest

from corral.core.resources import model_matches
from corral.sim.traces.common import Shape, gang, model_glob

OPENB_MODELS = {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"}


@pytest.mark.parametrize(
    ("total", "nodes", "shape"),
    [
        pytest.param(0, None, Shape(1, 0), id="cpu-only"),
        pytest.param(0.25, None, Shape(1, 0.25), id="fraction"),
        pytest.param(1, None, Shape(1, 1), id="one"),
        pytest.param(8, None, Shape(1, 8), id="full-node"),
        pytest.param(16, None, Shape(2, 8), id="two-nodes"),
        pytest.param(12, None, Shape(2, 6), id="even-split"),
        pytest.param(24, None, Shape(3, 8), id="three-nodes"),
        pytest.param(9, None, Shape(2, 5, rounded=True), id="uneven-rounds-up"),
        pytest.param(1.5, None, Shape(1, 2, rounded=True), id="fraction-above-one"),
        pytest.param(16, 2, Shape(2, 8), id="given-nodes"),
        pytest.param(3, 2, Shape(2, 2, rounded=True), id="given-nodes-uneven"),
        pytest.param(0, 2, Shape(2, 0), id="cpu-gang"),
        pytest.param(0.0004, None, Shape(1, 0.001, rounded=True), id="tiny-fraction"),
    ],
)
def test_gang(total: float, nodes: int | None, shape: Shape) -> None:
    assert gang(total, 8, nodes=nodes) == shape


@pytest.mark.parametrize(
    ("allowed", "pattern"),
    [
        pytest.param(["T4"], "T4", id="one-model"),
        pytest.param(["V100M16", "V100M32"], "V100M*", id="common-prefix"),
        pytest.param(["A10", "T4"], "[AT]*", id="first-letters"),
        pytest.param(["P100", "V100M16"], "[PV]*[06]", id="first-and-last"),
        pytest.param(["P100", "T4", "V100M16", "V100M32"], "[PTV]*", id="four"),
        pytest.param(
            ["A10", "G2", "P100", "T4", "V100M16", "V100M32"], "*[0246]", id="all-but-one"
        ),
        pytest.param(["A10", "G2", "T4", "V100M16", "V100M32"], "[AGTV]*[0246]", id="five"),
        pytest.param(sorted(OPENB_MODELS), None, id="every-model"),
    ],
)
def test_model_glob_is_exact(allowed: list[str], pattern: str | None) -> None:
    assert model_glob(allowed, OPENB_MODELS) == (pattern, True)
    assert {m for m in OPENB_MODELS if model_matches(m, pattern)} == set(allowed)


def test_model_glob_narrows_when_no_glob_is_exact() -> None:
    universe = {"ab", "ba", "aa", "bb"}
    assert model_glob(["ab", "ba"], universe) == ("ab", False)
