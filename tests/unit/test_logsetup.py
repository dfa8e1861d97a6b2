"""corral.logsetup: the daemons' --log-level and --log-format (text, or JSON lines)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from corral.logsetup import configure


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_is_one_object_per_line_with_the_exception() -> None:
    out = io.StringIO()
    configure("info", "json", stream=out)
    log = logging.getLogger("corral.test")
    log.debug("not written")
    log.info("hello %s", "world")
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        log.exception("it failed")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "INFO" and first["logger"] == "corral.test"
    assert first["message"] == "hello world" and "exception" not in first
    assert first["time"].endswith("+00:00")  # ISO 8601, UTC
    assert second["level"] == "ERROR" and second["message"] == "it failed"
    assert "RuntimeError: boom\nsecond line" in second["exception"]


def test_text_at_the_level_asked_for_any_case() -> None:
    out = io.StringIO()
    configure("WARNING", "Text", stream=out)
    logging.getLogger("corral.test").info("quiet")
    logging.getLogger("corral.test").warning("loud")
    assert out.getvalue().endswith(" WARNING corral.test: loud\n")
    assert "quiet" not in out.getvalue()


def test_unknown_names_are_refused() -> None:
    with pytest.raises(ValueError):
        configure("verbose")
    with pytest.raises(ValueError):
        configure("info", "xml")


def test_the_daemons_offer_both_options_with_environment_variables() -> None:
    from typer.main import get_command

    from corral.cli.main import app

    for command in ("server", "agent"):
        params = get_command(app).commands[command].params  # type: ignore[attr-defined]
        envvars = {p.opts[0]: p.envvar for p in params}
        assert envvars["--log-level"] == "CORRAL_LOG_LEVEL"
        assert envvars["--log-format"] == "CORRAL_LOG_FORMAT"
