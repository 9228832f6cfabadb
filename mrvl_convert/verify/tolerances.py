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
has two nearly tied logits; and a flip where fp32's two best logits are within the output's
error bound (``bound``) is such a tie, not counted at all (``metrics.Top1``).

Why there is an absolute floor (``atol``): the bound above is relative to the tensor's own
peak, which is unfair to a tensor whose values are all small (a sigmoid output whose largest
value is 0.009): the fp16 error it inherits from the layers before it does not shrink with its
peak. An error of at most ``atol = 2**-12`` (~2.4e-4: what rounding a value in [0.5, 1), a
probability or a normalised score, to float16 once may cost) always passes, whatever the
tensor's scale: the device cannot hold such an output any closer. Cosine and top-1 are then not
asked either. The floor is kept that low on purpose: a tensor whose values reach 5e-4 and that
fp16 wipes out (the near cancellation of tests/verify/test_layer_compare.py) still fails.

So in every sample a tensor passes when ``max|hybrid - fp32| <= max(atol, max_rel *
max|fp32|)`` and, above the floor, the cosine and top-1 bounds hold. A ``Tolerance`` built by
hand has no floor unless given one.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, Mapping, Optional, Sequence


@dataclass(frozen=True)
class Tolerance:
    """Bounds one tensor must meet. ``max_rel`` (``--rtol``) is max|hybrid - fp32| / max|fp32|;
    ``atol`` (``--atol``) an absolute error that always passes (module docstring)."""

    max_rel: float = 1e-2
    min_cosine: float = 0.999
    min_top1: float = 0.99
    reason: str = ""
    atol: float = 0.0

    def bound(self, scale: float) -> float:
        """The largest absolute error allowed on a tensor whose largest |fp32| is ``scale``."""
        return max(self.atol, self.max_rel * scale)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


DEFAULT_TOLERANCE = Tolerance(
    atol=2.0 ** -12,
    reason="fp16 default: about 20 float16 steps at the tensor's peak over tens of layers "
           "(see mrvl_convert/verify/tolerances.py)")


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

    def with_bounds(self, atol: Mapping[Optional[str], float],
                    rtol: Mapping[Optional[str], float], source: str) -> "Tolerances":
        """These tolerances with ``atol``/``rtol`` values set: key None for every tensor, a
        name for one tensor (``--atol y:1e-2``). ``source`` is the reason the overrides give."""
        default = replace(self.default, **_given(atol.get(None), rtol.get(None)))
        if atol.get(None) is not None or rtol.get(None) is not None:
            default = replace(default, reason=source)
        overrides = dict(self.overrides)
        for name in sorted({k for k in [*atol, *rtol] if k is not None}):
            base = overrides.get(name, default)
            overrides[name] = replace(base, reason=source, **_given(atol.get(name),
                                                                     rtol.get(name)))
        return Tolerances(default, overrides)


def _given(atol: Optional[float], rtol: Optional[float]) -> Dict[str, float]:
    values: Dict[str, float] = {}
    if atol is not None:
        values["atol"] = float(atol)
    if rtol is not None:
        values["max_rel"] = float(rtol)
    return values


def parse_tolerance_specs(specs: Sequence[str], option: str) -> Dict[Optional[str], float]:
    """``["1e-3", "scores:1e-2", "out:0:5e-3"]`` -> ``{None: 1e-3, "scores": 1e-2,
    "out:0": 5e-3}`` (the value follows the last colon: tensor names may hold colons). A
    ValueError whose message names the option and the bad value."""
    values: Dict[Optional[str], float] = {}
    for spec in specs:
        name, _, text = spec.rpartition(":")
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{option} {spec!r}: expected a number, or NAME:NUMBER for one "
                             "output (e.g. 1e-3 or scores:1e-2)") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{option} {spec!r}: must be a finite number >= 0")
        key = name or None
        if key in values and values[key] != value:
            raise ValueError(f"{option} gives {'every output' if key is None else repr(key)} "
                             "two different values")
        values[key] = value
    return values


def add_tolerance_args(parser: Any, applies: str = "") -> None:
    """``--atol`` and ``--rtol`` as ``mrvl-convert --verify`` and ``mrvl-verify`` both take them
    (``applies`` prefixes the help, e.g. "--verify: ")."""
    parser.add_argument("--atol", action="append", default=[], metavar="[OUTPUT:]VALUE",
                        help=f"{applies}absolute error always accepted, for every output or one "
                             "(default 2**-12 ~ 2.4e-4; repeatable)")
    parser.add_argument("--rtol", action="append", default=[], metavar="[OUTPUT:]VALUE",
                        help=f"{applies}error accepted relative to the output's largest value "
                             "(default 0.01; repeatable)")
