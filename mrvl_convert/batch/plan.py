"""A batch planned: one picklable ``Job`` per model, with a unique artifact directory name and
the input shapes that apply to it.

Shape overrides (``shapes={"x": [1, 3, 224, 224]}``) apply to every model that has an input of that
name; in a batch of several models they are ignored for models that do not have it (a single model
given a name it lacks is an error, as in ``convert``). An entry whose value is a mapping applies to
the models its key matches (a file name, a stem or a glob: ``{"det*.onnx": {"images": [1, 3, 416,
416]}}``), overrides the all-model entries, and must name an input of each model it matches.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from mrvl_convert.batch.summary import SUMMARY_FILE
from mrvl_convert.errors import OptionError
from mrvl_convert.frontend.input_shapes import shape_override
from mrvl_convert.frontend.load import safe_name
from mrvl_convert.options import ConvertOptions
from mrvl_convert.quantize.recipe import Quantization

PathLike = Union[str, os.PathLike]
# input name -> dims for every model; model pattern -> {input name -> dims} for some
BatchShapes = Mapping[str, Union[Sequence[int], Mapping[str, Sequence[int]]]]


@dataclass(frozen=True)
class VerifyOptions:
    """How ``verify`` judges: real inputs (.npz) or random ones, the tolerances (``atol``/
    ``rtol``: output name, or None for every output, to a value) and the criterion's name."""
    inputs: Optional[PathLike] = None
    atol: Mapping[Optional[str], float] = field(default_factory=dict)
    rtol: Mapping[Optional[str], float] = field(default_factory=dict)
    log_severity: int = 3               # onnxruntime's log level in verify (2: warnings too)
    criterion: str = "ours"             # or "marvell": compare_json.py's rule (verify/criteria.py)

    def with_absolute_paths(self) -> "VerifyOptions":
        if self.inputs is None:
            return self
        return replace(self, inputs=os.path.abspath(self.inputs))


@dataclass(frozen=True)
class Job:
    """Everything one worker needs, picklable: the model, its artifact directory, the options
    of its conversion (``options.name``: the directory's name; every file path absolute), the
    input shapes that may apply to it and, to verify it, the VerifyOptions."""
    model: str                      # absolute path of the ONNX file
    out_dir: str                    # absolute path of out_dir/<name>
    options: ConvertOptions
    shapes: Optional[Dict[str, List[int]]] = None         # the all-model overrides
    model_shapes: Optional[Dict[str, List[int]]] = None   # this model's own: never ignored
    ignore_unknown_shapes: bool = False
    verify: Optional[VerifyOptions] = None

    @property
    def name(self) -> str:
        """The artifact directory's name, and the model's name in its files."""
        return self.options.name or Path(self.out_dir).name


def plan_jobs(models: Sequence[PathLike], out_dir: PathLike,
              options: Optional[ConvertOptions] = None, *,
              shapes: Optional[BatchShapes] = None, verify: Optional[VerifyOptions] = None,
              quantize_per_model: Optional[Mapping[str, Quantization]] = None) -> List[Job]:
    """One Job per model with a unique, deterministic artifact directory name. ``options``
    apply to every model (their ``shapes`` stay unset: ``shapes`` gives the batch's, as
    ``convert_many`` takes them); ``quantize_per_model``: model path, as given, to the
    Quantization of that model, in place of ``options.quantize`` (a model missing from it is
    not quantized)."""
    options = options or ConvertOptions()
    if options.shapes is not None:
        raise OptionError("a batch's input shapes are given with shapes=..., which applies "
                          "them per model, not in the conversion options")
    out = Path(os.path.abspath(out_dir))
    common, per_model = shapes_per_model(shapes, [Path(m) for m in models])
    names = unique_names([Path(m) for m in models])
    checks = None if verify is None else verify.with_absolute_paths()
    jobs = []
    for model, name, own in zip(models, names, per_model):
        quantize = (options.quantize if quantize_per_model is None
                    else quantize_per_model.get(str(model)))
        jobs.append(Job(model=os.path.abspath(model), out_dir=str(out / name),
                        options=_job_options(options, name, quantize), shapes=common or None,
                        model_shapes=own or None, ignore_unknown_shapes=len(models) > 1,
                        verify=checks))
    return jobs


def _job_options(options: ConvertOptions, name: str, quantize: Optional[Quantization]
                 ) -> ConvertOptions:
    if quantize is not None and not isinstance(quantize.calibration, (str, os.PathLike)):
        raise OptionError("convert_many(quantize=...): the calibration must be a file or "
                          "directory path (a reader or arrays cannot go to worker processes)")
    return replace(options, name=name, quantize=quantize).with_absolute_paths()


def shapes_per_model(shapes: Optional[BatchShapes], models: Sequence[Path]
                     ) -> Tuple[Dict[str, List[int]], List[Dict[str, List[int]]]]:
    """Split ``shapes`` into the all-model overrides and, per model, those of the patterns
    matching it. An OptionError for a pattern that matches no model, or two patterns that
    give one model's input two different shapes."""
    common: Dict[str, List[int]] = {}
    patterns: Dict[str, Dict[str, List[int]]] = {}
    for key, value in (shapes or {}).items():
        if isinstance(value, Mapping):
            for name, dims in value.items():
                _add_shapes(patterns.setdefault(key, {}), {name: shape_override(name, dims)},
                            key, None)
        elif "=" in key:  # "det*.onnx=images", as on the command line
            pattern, name = key.split("=", 1)
            _add_shapes(patterns.setdefault(pattern, {}), {name: shape_override(name, value)},
                        key, None)
        else:
            common[key] = shape_override(key, value)
    per_model: List[Dict[str, List[int]]] = [{} for _ in models]
    for pattern, given in patterns.items():
        hits = [k for k, m in enumerate(models) if model_matches(pattern, m)]
        if not hits:
            raise OptionError(f"input shapes for {pattern!r}: no model matches it (models: "
                              f"{', '.join(m.name for m in models[:5])}"
                              f"{', ...' if len(models) > 5 else ''})")
        for k in hits:
            _add_shapes(per_model[k], given, pattern, models[k])
    return common, per_model


def _add_shapes(own: Dict[str, List[int]], given: Mapping[str, List[int]], pattern: str,
                model: Optional[Path]) -> None:
    for name, dims in given.items():
        if name in own and own[name] != dims:
            where = f"of model {model}" if model is not None else f"of models {pattern!r}"
            raise OptionError(f"input {name!r} {where} is given two different shapes "
                              f"({own[name]} and {dims}, the latter by {pattern!r})")
        own[name] = dims


def model_matches(pattern: str, model: Path) -> bool:
    """A model's file name, stem, or path (as given or absolute) matches the glob ``pattern``."""
    candidates = (model.name, model.stem, model.as_posix(), Path(os.path.abspath(model)).as_posix())
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


def unique_names(paths: Sequence[Path]) -> List[str]:
    """safe_name(stem) per path; a name already taken gets _2, _3... (case-insensitively)."""
    taken = {SUMMARY_FILE.casefold()}
    names = []
    for path in paths:
        base = safe_name(path.stem)
        name, k = base, 2
        while name.casefold() in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name.casefold())
        names.append(name)
    return names
