"""Shared pieces of the wire and file schemas."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic import ValidationError as PydanticValidationError

from corral.core.units import parse_duration, parse_size
from corral.errors import ValidationError


def nul_problem(value: object) -> str | None:
    """What in ``value`` holds a NUL character (a string, or a key or value of the lists
    and mappings in it); None when nothing does. Nested models check their own fields."""
    if isinstance(value, str):
        return "must not contain a NUL character (\\x00)" if "\0" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "\0" in key:
                return f"key {key!r} must not contain a NUL character (\\x00)"
            problem = nul_problem(item)
            if problem:
                return f"{key!r}: {problem}" if isinstance(key, str) else problem
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            problem = nul_problem(item)
            if problem:
                return problem
    return None


def no_nul(value: str) -> str:
    """A validator for single strings (query and path parameters): refuses NUL."""
    problem = nul_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class Strict(BaseModel):
    """Base for every schema: unknown keys are errors (a typo in YAML must not pass), and
    no string anywhere in it holds a NUL character (PostgreSQL refuses them in text, and
    no name, command or path needs one)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        if isinstance(value, str | dict | list | tuple | set | frozenset):
            problem = nul_problem(value)
            if problem:
                raise ValueError(problem)
        return value


def _duration(value: object) -> object:
    if value is not None and not isinstance(value, int | float | str):
        raise ValueError(f"expected a duration such as 90s, 15m or 4h, got {value!r}")
    return value if value is None else parse_duration(value)


def _size(value: object) -> object:
    if value is not None and not isinstance(value, int | float | str):
        raise ValueError(f"expected a size such as 512MB or 80GB, got {value!r}")
    return value if value is None else parse_size(value)


Duration = Annotated[float, BeforeValidator(_duration)]
MAX_INT = 2**63 - 1  # the largest integer the database stores
Int64 = Annotated[int, Field(ge=-MAX_INT, le=MAX_INT)]
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
Size = Annotated[int, BeforeValidator(_size)]
SafeStr = Annotated[str, AfterValidator(no_nul)]  # a query or path string without NUL


def describe_errors(exc: PydanticValidationError, what: str = "") -> str:
    """One line per problem, each naming the field: ``resources.gpus: ...``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if p not in ("function-after",)) or what
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        # a model-level check has no location: its message names the field itself
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(lines)


def validate(model: type[BaseModel], data: object, what: str):  # noqa: ANN201
    """``model.model_validate(data)``, re-raised as Corral's ``ValidationError``."""
    if not isinstance(data, dict):
        raise ValidationError(f"{what}: expected a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise ValidationError(f"{what}: {describe_errors(exc)}") from None
