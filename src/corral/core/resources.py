"""GPU requests (whole, fractional, MIG) and model matching.

A job asks for resources per node; ``tasks_per_node`` splits them evenly among the node's
tasks. Device capacity is counted in milli-GPUs so that fractions add up exactly.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from enum import StrEnum

MILLI = 1000
_MIG_PROFILE = re.compile(r"^\d+g\.\d+gb$", re.IGNORECASE)
_WILDCARDS = set("*?[")


class GpuKind(StrEnum):
    NONE = "none"
    WHOLE = "whole"
    FRACTION = "fraction"
    MIG = "mig"


@dataclass(frozen=True)
class GpuRequest:
    """GPUs asked for on each node of a job.

    ``count`` whole GPUs (WHOLE), ``milli`` thousandths of one GPU (FRACTION), or one
    instance of ``mig_profile`` (MIG). ``model`` is a pattern from the ``H100:8`` form.

    ``tpu`` is set (to the generation, ``v5p``) for a node of a TPU slice: no GPUs (kind
    NONE), but every chip of a TPU host of that generation (``JobSpec.tpu`` has the shape).
    """

    kind: GpuKind = GpuKind.NONE
    count: int = 0
    milli: int = 0
    mig_profile: str | None = None
    model: str | None = None
    tpu: str | None = None

    def __str__(self) -> str:
        prefix = f"{self.model}:" if self.model else ""
        if self.kind is GpuKind.WHOLE:
            return f"{prefix}{self.count}"
        if self.kind is GpuKind.FRACTION:
            return f"{prefix}{self.milli / MILLI:g}"
        if self.kind is GpuKind.MIG:
            return f"{prefix}{self.mig_profile}"
        return "0"

    @property
    def whole_gpus(self) -> int:
        """Whole devices this request occupies per node (0 for shares and MIG)."""
        return self.count if self.kind is GpuKind.WHOLE else 0


def parse_gpus(value: int | float | str) -> GpuRequest:
    """Parse ``8``, ``"H100:8"``, ``0.25``, ``"3g.40gb"`` or ``"A100:3g.40gb"``.

    Raises ``ValueError`` naming the accepted forms.
    """
    forms = "a count (8), MODEL:COUNT (H100:8), a fraction (0.5) or a MIG profile (1g.10gb)"
    if isinstance(value, bool):
        raise ValueError(f"expected {forms}, got {value!r}")
    model: str | None = None
    raw: int | float | str = value
    if isinstance(value, str):
        text = value.strip()
        if ":" in text:
            model, _, text = text.partition(":")
            model = model.strip()
            if not model:
                raise ValueError(f"expected {forms}, got {value!r}")
        if _MIG_PROFILE.match(text):
            return GpuRequest(kind=GpuKind.MIG, mig_profile=text.lower(), model=model)
        try:
            raw = float(text) if any(c in text for c in ".eE") else int(text)
        except ValueError:
            raise ValueError(f"expected {forms}, got {value!r}") from None
    number = float(raw)
    if number < 0 or number != number:
        raise ValueError(f"GPU count must be >= 0, got {value!r}")
    if number == 0:
        return GpuRequest(model=model)
    if number < 1:
        milli = round(number * MILLI)
        if milli < 1:
            raise ValueError(f"GPU fraction must be at least 0.001, got {value!r}")
        return GpuRequest(kind=GpuKind.FRACTION, milli=milli, model=model)
    if number != int(number):
        raise ValueError(f"GPU counts above 1 must be whole numbers, got {value!r}")
    return GpuRequest(kind=GpuKind.WHOLE, count=int(number), model=model)


def model_matches(model: str, pattern: str | None) -> bool:
    """Whether device ``model`` matches ``pattern``, case-insensitively.

    A glob matches the whole model (``*80GB`` matches ``A100-80GB``). Plain text matches
    the model or a prefix of it ending at a separator: ``H100`` matches ``H100-SXM-80GB``
    but ``A10`` does not match ``A100-80GB``, nor ``L4`` ``L40S``. ``|`` separates
    alternatives, each a glob or plain text: ``V100M16|V100M32`` matches either model
    (empty alternatives are ignored).
    """
    if not pattern:
        return True
    if "|" in pattern:
        alternatives = [p for p in pattern.split("|") if p.strip()]
        return not alternatives or any(model_matches(model, p.strip()) for p in alternatives)
    model, pattern = model.lower(), pattern.lower()
    if _WILDCARDS & set(pattern):
        return fnmatch.fnmatchcase(model, pattern)
    return model == pattern or (model.startswith(pattern) and not model[len(pattern)].isalnum())
