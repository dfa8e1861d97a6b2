"""GPU requests in every manifest form, and device model matching."""

from __future__ import annotations

import pytest

from corral.core.resources import GpuKind, GpuRequest, model_matches, parse_gpus


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(8, GpuRequest(GpuKind.WHOLE, count=8), id="int"),
        pytest.param(1, GpuRequest(GpuKind.WHOLE, count=1), id="one"),
        pytest.param(2.0, GpuRequest(GpuKind.WHOLE, count=2), id="whole-float"),
        pytest.param("8", GpuRequest(GpuKind.WHOLE, count=8), id="numeric-string"),
        pytest.param(" 4 ", GpuRequest(GpuKind.WHOLE, count=4), id="padded-string"),
        pytest.param("H100:8", GpuRequest(GpuKind.WHOLE, count=8, model="H100"), id="model-count"),
        pytest.param(
            " H100 :8", GpuRequest(GpuKind.WHOLE, count=8, model="H100"), id="model-padded"
        ),
        pytest.param(0.25, GpuRequest(GpuKind.FRACTION, milli=250), id="fraction"),
        pytest.param("0.5", GpuRequest(GpuKind.FRACTION, milli=500), id="fraction-string"),
        pytest.param(0.001, GpuRequest(GpuKind.FRACTION, milli=1), id="smallest-fraction"),
        pytest.param(
            "A100:0.5", GpuRequest(GpuKind.FRACTION, milli=500, model="A100"), id="model-fraction"
        ),
        pytest.param("3g.40gb", GpuRequest(GpuKind.MIG, mig_profile="3g.40gb"), id="mig"),
        pytest.param("1G.10GB", GpuRequest(GpuKind.MIG, mig_profile="1g.10gb"), id="mig-upper"),
        pytest.param(
            "A100:3g.40gb",
            GpuRequest(GpuKind.MIG, mig_profile="3g.40gb", model="A100"),
            id="model-mig",
        ),
        pytest.param(0, GpuRequest(), id="zero"),
        pytest.param("0", GpuRequest(), id="zero-string"),
    ],
)
def test_parse_gpus_accepts(value: int | float | str, expected: GpuRequest) -> None:
    assert parse_gpus(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(-1, ">= 0", id="negative"),
        pytest.param("-1", ">= 0", id="negative-string"),
        pytest.param(-0.5, ">= 0", id="negative-fraction"),
        pytest.param(float("nan"), ">= 0", id="nan"),
        pytest.param(1.5, "whole numbers", id="fraction-above-one"),
        pytest.param("2.5", "whole numbers", id="fraction-above-one-string"),
        pytest.param(0.0001, "at least 0.001", id="fraction-too-small"),
        pytest.param("eight", "H100:8", id="word"),
        pytest.param("", "H100:8", id="empty"),
        pytest.param(":8", "H100:8", id="empty-model"),
        pytest.param("H100:", "H100:8", id="missing-count"),
        pytest.param("H100:x", "H100:8", id="bad-count"),
        pytest.param("4g", "H100:8", id="half-a-mig-profile"),
        pytest.param(True, "H100:8", id="bool"),
    ],
)
def test_parse_gpus_refuses(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        parse_gpus(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_", "text", "whole"),
    [
        pytest.param(GpuRequest(), "0", 0, id="none"),
        pytest.param(GpuRequest(GpuKind.WHOLE, count=8), "8", 8, id="whole"),
        pytest.param(GpuRequest(GpuKind.WHOLE, count=8, model="H100"), "H100:8", 8, id="model"),
        pytest.param(GpuRequest(GpuKind.FRACTION, milli=250), "0.25", 0, id="fraction"),
        pytest.param(GpuRequest(GpuKind.MIG, mig_profile="3g.40gb"), "3g.40gb", 0, id="mig"),
    ],
)
def test_gpu_request_str_and_whole_gpus(request_: GpuRequest, text: str, whole: int) -> None:
    assert str(request_) == text
    assert request_.whole_gpus == whole


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("8", id="whole"),
        pytest.param("H100:8", id="model"),
        pytest.param("0.25", id="fraction"),
        pytest.param("A100:3g.40gb", id="mig"),
    ],
)
def test_parse_gpus_round_trips_its_string(text: str) -> None:
    assert str(parse_gpus(text)) == text


@pytest.mark.parametrize(
    ("model", "pattern", "matches"),
    [
        pytest.param("H100-SXM-80GB", None, True, id="no-pattern"),
        pytest.param("H100-SXM-80GB", "", True, id="empty-pattern"),
        pytest.param("H100-SXM-80GB", "H100", True, id="plain-prefix"),
        pytest.param("H100-SXM-80GB", "h100", True, id="case-insensitive"),
        pytest.param("H100", "H100", True, id="exact"),
        pytest.param("H100-SXM-80GB", "H100*", True, id="glob-star"),
        pytest.param("A100-80GB", "*80GB", True, id="glob-suffix"),
        pytest.param("A100-40GB", "*80GB", False, id="glob-suffix-miss"),
        pytest.param("A100-80GB", "A100-?0GB", True, id="glob-question-mark"),
        pytest.param("H100", "[AH]100", True, id="glob-class"),
        pytest.param("H100-SXM", "H100", True, id="prefix-of-longer-name"),
        pytest.param("H200", "H100", False, id="other-model"),
        pytest.param("GH200", "H200", False, id="prefix-not-substring"),
        pytest.param("H100-SXM", "SXM", False, id="middle-is-not-prefix"),
        pytest.param("H100", "H100-SXM", False, id="pattern-longer-than-model"),
        pytest.param("A100-40GB", "A100*", True, id="star-after-model"),
        pytest.param("H100-SXM-80GB", "H100", True, id="prefix-with-suffixes"),
        pytest.param("V100M32", "V100M16|V100M32", True, id="alternatives-second"),
        pytest.param("V100M16", "V100M16|V100M32", True, id="alternatives-first"),
        pytest.param("V100M32", "V100M16 | v100m32", True, id="alternatives-padded"),
        pytest.param("T4", "V100M16|V100M32", False, id="alternatives-miss"),
        pytest.param("A100-80GB", "H100|A100*", True, id="alternative-glob"),
        pytest.param("A100-80GB", "H100|A10", False, id="alternative-plain-whole-word"),
        pytest.param("T4", "|", True, id="only-empty-alternatives"),
        pytest.param("T4", "T4||", True, id="empty-alternative-ignored"),
    ],
)
def test_model_matches(model: str, pattern: str | None, matches: bool) -> None:
    assert model_matches(model, pattern) is matches


@pytest.mark.parametrize(
    ("model", "pattern", "matches"),
    [
        pytest.param("A100-80GB", "A10", False, id="a10-is-not-a100"),
        pytest.param("L40S", "L4", False, id="l4-is-not-l40s"),
        pytest.param("A10", "A10", True, id="a10-exact"),
        pytest.param("H100 SXM", "h100", True, id="space-separator"),
        pytest.param("A100-80GB", "A10*", True, id="explicit-glob-still-wide"),
    ],
)
def test_plain_model_names_match_whole_words(model: str, pattern: str, matches: bool) -> None:
    assert model_matches(model, pattern) is matches
