"""Pass criteria, as data: one object per criterion, chosen by name.

``ours`` is the project's default (``verify/tolerances.py``). ``marvell`` is the rule of
Marvell's own checker, ``utils/compare_json.py`` of MarvellEmbeddedProcessors/MarvellMLTools
(commit 85b37003ae8929e5679e153ccd58b5f05803ff29, function ``compare_1d_tensors``), applied
to one flattened output at a time, "test" the tensor under judgement and "base" the reference:

- an element is *counted* when ``|max|base| / base[i]| <= 100`` (``OOM_LIMIT``; when
  ``base[i] == 0`` the ratio uses ``test[i]`` instead, and an element zero in both is counted);
  smaller elements are ignored whatever their error;
- fp16 (``-fgft 0.03``): a counted element passes when ``base*(1 - sign(base)*0.03) <= test <=
  base*(1 + sign(base)*0.03)`` (both ends inclusive, i.e. within 3% of the base element);
- int8 (``-d 3.0``): it also passes when ``ceil(|test - base| / (unit/2)) - 1 <= 3`` (0 when
  equal), ``unit = max|test| / 127`` (``max|base| / 127`` when ``max|test|`` is 0): the script's
  "3 bits off" is thus an error of at most two units;
- the tensor passes when every counted element passes and the shapes agree. The script only
  warns when the base reaches +-65504 in fp16; that does not change its verdict, nor ours.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

OURS = "ours"
MARVELL = "marvell"
CRITERION_NAMES = (OURS, MARVELL)


@dataclass(frozen=True)
class ElementCheck:
    """The verdict of one tensor under an element-wise criterion. ``index`` is the flat index
    of the first failing counted element (None when passed), ``got``/``want`` its values."""

    passed: bool
    counted: int
    failed: int
    index: Optional[int] = None
    got: Optional[float] = None
    want: Optional[float] = None
    reason: str = ""

    def describe(self, tensor: str) -> str:
        if self.passed:
            return f"{tensor}: passed ({self.counted} elements counted)"
        if self.index is None:
            return f"{tensor}: failed ({self.reason})"
        return (f"{tensor}: {self.failed} of {self.counted} counted elements off, first at flat "
                f"index {self.index}: {self.got:.8g} vs reference {self.want:.8g}")


@dataclass(frozen=True)
class MarvellCriterion:
    """compare_json.py's rule (module docstring); ``quantize`` is "fp16" or "int8"."""

    name: str = MARVELL
    fudge: float = 0.03
    oom_limit: float = 100.0
    bit_off_delta: float = 3.0

    def check(self, test: np.ndarray, base: np.ndarray, quantize: str = "fp16") -> ElementCheck:
        t = np.asarray(test, dtype=np.float64).ravel()
        b = np.asarray(base, dtype=np.float64).ravel()
        if t.shape != b.shape:
            return ElementCheck(False, 0, 0, reason=f"{t.size} elements vs {b.size} in the "
                                                    f"reference")
        if t.size == 0:
            return ElementCheck(False, 0, 0, reason="empty tensor (compare_json fails it)")
        counted = self.counted(t, b)
        match = self.matches(t, b, quantize)
        bad = np.flatnonzero(counted & ~match)
        if bad.size:
            i = int(bad[0])
            return ElementCheck(False, int(counted.sum()), int(bad.size), i,
                                float(t[i]), float(b[i]))
        return ElementCheck(True, int(counted.sum()), 0)

    def counted(self, t: np.ndarray, b: np.ndarray) -> np.ndarray:
        max_base = np.abs(b).max()
        ratio = np.full(b.shape, self.oom_limit)
        with np.errstate(divide="ignore", invalid="ignore"):
            by_base = np.abs(max_base / b)
            by_test = np.abs(max_base / t)
        ratio = np.where(b != 0, by_base, np.where(t != 0, by_test, ratio))
        return ratio <= self.oom_limit

    def matches(self, t: np.ndarray, b: np.ndarray, quantize: str) -> np.ndarray:
        exp_min = b * (1.0 - np.sign(b) * self.fudge)
        exp_max = b * (1.0 + np.sign(b) * self.fudge)
        within = (t <= exp_max) & (t >= exp_min)
        if quantize == "fp16":
            return within
        return within | (self.bits_off(t, b) <= self.bit_off_delta)

    @staticmethod
    def bits_off(t: np.ndarray, b: np.ndarray) -> np.ndarray:
        max_test, max_base = np.abs(t).max(), np.abs(b).max()
        unit = (max_base if max_test == 0 and max_base != 0 else max_test) / 127
        with np.errstate(divide="ignore", invalid="ignore"):
            off = np.ceil(np.abs(t - b) / (unit / 2.0)) - 1
        return np.where(t != b, off, 0.0)


def marvell_criterion() -> MarvellCriterion:
    """The ``marvell`` criterion with compare_json.py's default arguments."""
    return MarvellCriterion()


def check_name(name: str) -> str:
    """``name`` when it names a criterion; a ValueError listing the names otherwise."""
    if name not in CRITERION_NAMES:
        raise ValueError(f"unknown criterion {name!r} (choose from {', '.join(CRITERION_NAMES)})")
    return name


def quantize_of(manifest: dict) -> str:
    """'int8' when the artifact's Mrvl layers are int8 (the manifest's ``quantization``
    section), 'fp16' otherwise: which of compare_json's rules applies."""
    section = manifest.get("quantization") if isinstance(manifest, dict) else None
    if isinstance(section, dict) and section:
        return "int8"
    return "fp16"

