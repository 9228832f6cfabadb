"""What a conversion is asked to do: the options of ``convert``, in one frozen object.

The caller (``convert``'s keywords, ``convert_many``, the command line) builds it once; it is
checked as it is built and travels whole, pickled, to a batch worker and into the conversion.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from mrvl_convert.errors import MrvlConvertError, OptionError
from mrvl_convert.estimate.profile import HardwareProfile
from mrvl_convert.frontend.foreign_int8 import check_mode
from mrvl_convert.frontend.input_values import check_values
from mrvl_convert.layers import MARVELL
from mrvl_convert.partition.plan import POLICIES
from mrvl_convert.quantize.recipe import Quantization
from mrvl_convert.rules.loader import RuleSource, builtin_digests, builtin_path

Rules = Optional[Union[RuleSource, Sequence[RuleSource]]]
# True: the built-in hardware profile; a path: a profile file; None or False: no estimate
Estimate = Union[None, bool, str, "os.PathLike[str]", HardwareProfile]
Shapes = Mapping[str, Sequence[int]]


@dataclass(frozen=True)
class ConvertOptions:
    """The options of one conversion (``convert``'s keywords, which document each one).

    ``rules`` may be given as None, one file or several: it is kept as a tuple. ``deny`` is kept
    as given (a list of op types or node names). ``shapes`` is passed to the loader, which
    checks it against the model's inputs."""
    shapes: Optional[Shapes] = None
    policy: str = "multi"
    rules: Tuple[RuleSource, ...] = ()
    name: Optional[str] = None
    layer_set: str = MARVELL
    max_subgraphs: Optional[int] = None
    deny: Tuple[str, ...] = ()
    min_compute_layers: int = 1
    estimate: Estimate = None
    draw: bool = False
    quantize: Optional[Quantization] = None
    keep_fp32: Tuple[str, ...] = ()
    values: Optional[Mapping[str, Any]] = None
    foreign_int8: str = "requantize"
    # a norm's ReduceMean of squares -> k: its input scaled by 2**-k (frontend/norm_range.py)
    norm_scales: Optional[Mapping[str, int]] = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise OptionError(f"unknown policy {self.policy!r}; choose one of "
                              f"{', '.join(POLICIES)}")
        if self.max_subgraphs is not None and not _count(self.max_subgraphs):
            raise OptionError(f"max_subgraphs must be an integer >= 0, got {self.max_subgraphs!r}")
        if not _count(self.min_compute_layers):
            raise OptionError(f"min_compute_layers must be an integer >= 0, got "
                              f"{self.min_compute_layers!r}")
        if isinstance(self.deny, str) or not all(isinstance(d, str) and d for d in self.deny):
            raise MrvlConvertError(f"deny must be a list of op types or node names, got "
                                   f"{self.deny!r}")
        if self.quantize is not None and not isinstance(self.quantize, Quantization):
            raise OptionError(f"quantize must be a Quantization, got "
                              f"{type(self.quantize).__name__}")
        _check_keep_fp32(self.keep_fp32, self.quantize)
        check_mode(self.foreign_int8)
        # Copies: what the caller changes afterwards does not change these options.
        object.__setattr__(self, "deny", tuple(self.deny))
        object.__setattr__(self, "keep_fp32", tuple(self.keep_fp32))
        object.__setattr__(self, "rules", _rule_tuple(self.rules))
        if isinstance(self.shapes, Mapping):
            object.__setattr__(self, "shapes", dict(self.shapes))
        object.__setattr__(self, "values", check_values(self.values) or None)
        object.__setattr__(self, "norm_scales", _check_norm_scales(self.norm_scales))

    def with_absolute_paths(self) -> "ConvertOptions":
        """These options with the rule files, the hardware profile file and the calibration
        path made absolute: the same files wherever (whichever working directory) they are
        read, as in a worker process."""
        estimate = self.estimate
        if isinstance(estimate, (str, os.PathLike)):
            estimate = os.path.abspath(estimate)
        quantize = self.quantize
        if quantize is not None and isinstance(quantize.calibration, (str, os.PathLike)):
            quantize = replace(quantize, calibration=os.path.abspath(quantize.calibration))
        return replace(self, rules=tuple(os.path.abspath(r) for r in self.rules),
                       estimate=estimate, quantize=quantize)

    def manifest_entry(self, input_shapes: Mapping[str, Sequence[int]]) -> Dict[str, Any]:
        """The manifest's ``options`` section: the shapes the model was converted with and
        the rule files (name and sha256), and the partition options that differ from the
        defaults (``min_compute_layers`` is written only when it is not upstream's 1)."""
        entry: Dict[str, Any] = {"policy": self.policy,
                                 "shapes": {k: list(v) for k, v in sorted(input_shapes.items())},
                                 "rules": _rule_sources(self.rules, self.layer_set),
                                 "layer_set": self.layer_set}
        if self.max_subgraphs is not None:
            entry["max_subgraphs"] = self.max_subgraphs
        if self.deny:
            entry["deny"] = sorted(set(self.deny))
        if self.min_compute_layers != 1:
            entry["min_compute_layers"] = self.min_compute_layers
        if self.keep_fp32:
            entry["keep_fp32"] = sorted(set(self.keep_fp32))
        if self.norm_scales:
            entry["norm_scales"] = {k: self.norm_scales[k] for k in sorted(self.norm_scales)}
        if self.foreign_int8 != "requantize":
            entry["foreign_int8"] = self.foreign_int8
        if self.values:
            entry["values"] = {k: self.values[k] for k in sorted(self.values)}
        return entry


def _check_keep_fp32(names: object, quantize: Optional[Quantization]) -> None:
    """``keep_fp32``: node names (the converter's, as in report.json) of an fp16 conversion;
    ``auto`` is chosen by ``tune.keep_fp32`` (it needs verify), int8 has ``keep_fp16``."""
    if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
        raise OptionError(f"keep_fp32 must be a list of node names, got {names!r}")
    if "auto" in names:
        raise OptionError("keep_fp32 'auto' is chosen by converting and verifying: use "
                          "mrvl_convert.tune.keep_fp32.convert_keep_fp32 (mrvl-convert "
                          "--keep-fp32 auto)")
    if names and quantize is not None:
        raise OptionError("keep_fp32 keeps nodes of an fp16 conversion in fp32 on the CPU; with "
                          "quantize (int8) keep layers in float with keep_fp16")


def _check_norm_scales(scales: object) -> Optional[Dict[str, int]]:
    """``norm_scales``: node name -> an exponent k in 1..100 (a copy; None when empty)."""
    if scales is None:
        return None
    if not isinstance(scales, Mapping) or not all(
            isinstance(k, str) and _count(v) and 0 < v <= 100 for k, v in scales.items()):
        raise OptionError(f"norm_scales must map node names to exponents 1..100, got "
                          f"{scales!r}")
    return dict(scales) or None


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _rule_tuple(rules: Rules) -> Tuple[RuleSource, ...]:
    if rules is None:
        return ()
    if isinstance(rules, (str, Path)):
        return (rules,)
    return tuple(rules)


def _rule_sources(rules: Sequence[RuleSource], layer_set: str) -> List[Dict[str, str]]:
    sources = [{"name": "builtin" if path == builtin_path() else f"builtin/{path.name}",
                "sha256": digest} for path, digest in builtin_digests(layer_set)]
    for path in rules:
        sources.append({"name": Path(path).name, "sha256": _sha(Path(path))})
    return sources


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
