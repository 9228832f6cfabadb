"""Accuracy tolerances for comparing the hybrid (fp16 Mrvl + fp32 CPU) run with fp32 onnxruntime.

Tolerances are data: a default plus per-tensor overrides, and every override must say in words
why that tensor deserves a different bound, so a loosened check is never silent.

Why the default is what it is: float16 keeps 11 significant bits, so one rounding moves a value
by at most 2**-11 ~ 4.9e-4 of itself. A layer's output is rounded once, and the errors of
successive layers add up roughly like a random walk, each layer also amplifying its input's
error by its gain. For the CNN depths this tool targets (tens of layers) that puts the error of a
tensor, measured against the largest magnitude in that tensor, at a few 1e-3; ``max_rel = 1e-2``
leaves a margin of a few times that, i.e. about 20 float16 steps at the tensor's peak. Cosine
similarity >= 0.999 says the error is small everywhere, not only at the peak. Classifier top-1
agreement >= 0.99 allows one flip in a hundred predictions, which only happens when fp32 itself
has two nearly tied logits.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Mapping, Optional


@dataclass(frozen=True)
class Tolerance:
    """Bounds one tensor must meet. ``max_rel`` is max|hybrid - fp32| / max|fp32|."""

    max_rel: float = 1e-2
    min_cosine: float = 0.999
    min_top1: float = 0.99
    reason: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


DEFAULT_TOLERANCE = Tolerance(
    reason="fp16 default: about 20 float16 steps at the tensor's peak over tens of layers "
           "(see mrvl_convert/runtime/tolerances.py)")


@dataclass(frozen=True)
class Tolerances:
    """The default tolerance and the per-tensor overrides, each with its written reason."""

    default: Tolerance = DEFAULT_TOLERANCE
    overrides: Mapping[str, Tolerance] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, tol in self.overrides.items():
            if not isinstance(tol, Tolerance):
                raise TypeError(f"override for {name!r} must be a Tolerance, got {tol!r}")
            if not tol.reason.strip():
                raise ValueError(f"the tolerance override for {name!r} needs a written reason")

    def for_tensor(self, name: str) -> Tolerance:
        return self.overrides.get(name, self.default)

    def to_dict(self) -> Dict[str, Any]:
        return {"default": self.default.to_dict(),
                "overrides": {k: v.to_dict() for k, v in self.overrides.items()}}

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]]) -> "Tolerances":
        """``{"default": {...}, "overrides": {"tensor": {"max_rel": .., "reason": ".."}}}``."""
        if data is None:
            return cls()
        default = Tolerance(**{**DEFAULT_TOLERANCE.to_dict(), **data.get("default", {})})
        overrides = {name: Tolerance(**{**default.to_dict(), "reason": "", **spec})
                     for name, spec in data.get("overrides", {}).items()}
        return cls(default, overrides)
