"""HybridSession: run a converted artifact directory like an onnxruntime InferenceSession.

Stages run in manifest order: Mrvl stages on the fp16 simulator (compiled once, here), CPU stages
on ``onnxruntime.InferenceSession`` (created once, here). Tensors flow between stages by their
ONNX names through one environment dict. Reading the manifest into stages (and checking it) is
``stages.py``; this module runs them:

- requires: an artifact directory written by ``mrvl_convert.convert``;
- ensures: ``run`` refuses a feed whose names, dtypes or shapes are not the model inputs' exact
  ones (``InputFeedError``, as onnxruntime would), hands back the outputs asked for (model outputs
  or stage-boundary tensors), and leaves the call's fp16 range events in ``last_range_events``;
  an input pinned at conversion (the manifest's ``options.values``) fed another value is an
  ``InputFeedError`` naming the input and both values (the artifact computes the model for the
  pinned value only, so any other value would get that value's results silently).

One session: a model whose Mrvl stages are each one graph-engine segment runs, from its first
call, as ONE onnxruntime session holding all the stages (``fused.py``), with the same numbers;
``fused`` and ``fused_reason`` say whether and why not. A call that asks for boundary tensors
(``capture``, ``run_layers``) or meets a range error runs stage by stage.

Threads: stages run one after another, so every CPU stage (and the onnxruntime GEMM engine) gets
the same intra-op budget, ``threads``, and its idle workers sleep instead of spinning: a spinning
pool left behind by one stage would take the cores from the simulator's numpy and from the next
stage. The one exception is a model that is a single Mrvl stage the graph engine runs as one
onnxruntime session: nothing else runs in a call, so its workers may spin as onnxruntime's own
do (``MrvlSimulator.compile(alone=True)``). (numpy's own BLAS threads are numpy's setting, e.g.
``OPENBLAS_NUM_THREADS``.)
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from mrvl_convert.errors import ArtifactError, InputFeedError, ShapeError
from mrvl_convert.core.artifact import read_json, require
from mrvl_convert.core.file_hashes import check_stage_files
from mrvl_convert.kernels.gemm import GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.runtime import fused
from mrvl_convert.runtime.options import QUIET, WARNINGS
from mrvl_convert.runtime.simulator import CompiledSubgraph, MrvlSimulator, RangeEvent
from mrvl_convert.runtime.stages import (DTYPES, Stage, StageReader, TensorSpec, check_wiring,
                                         read_tensors)

# The log levels too: the CLI takes them from here, with the session.
__all__ = ["HybridSession", "LayerOutput", "NodeArg", "QUIET", "WARNINGS"]


@dataclass(frozen=True)
class NodeArg:
    """Like onnxruntime.NodeArg: name, shape, type ('tensor(float)')."""

    name: str
    shape: List[int]
    type: str


@dataclass(frozen=True)
class LayerOutput:
    """One Mrvl layer's fp16 output from one run, in the simulator's physical layout."""

    stage: str
    spec: LayerSpec
    value: np.ndarray


class HybridSession:
    """Runs an artifact directory written by ``mrvl_convert.convert``."""

    def __init__(self, artifact_dir: "str | os.PathLike[str]", *,
                 on_range_error: str = "raise", gemm: "str | GemmEngine" = "numpy",
                 threads: int = 0, log_severity: int = QUIET, engine: str = "graph") -> None:
        """``gemm``: which library runs the simulator's matrix products, ``"numpy"`` or
        ``"onnxruntime"`` (see ``mrvl_convert/kernels/gemm.py``); the fp16 number model is the
        same with either. ``threads``: intra-op threads of every onnxruntime session this
        session opens (CPU stages, and the GEMM engine when named by string); 0 is
        onnxruntime's default, one per physical core. ``log_severity``: onnxruntime's log level
        for the CPU stages' sessions (3: errors only, 2: warnings too). ``engine``: how the
        simulator runs the Mrvl stages, "graph" (runs of layers as onnxruntime sessions, with
        ``threads`` too) or "layers" (numpy, one layer at a time: the specification; ``gemm``
        applies to it); see ``MrvlSimulator``."""
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise ValueError(f"threads must be an integer >= 0, got {threads!r}")
        self.threads = threads
        self.log_severity = log_severity
        if isinstance(gemm, str):
            gemm = GemmEngine(gemm, threads)
        self.artifact_dir = str(artifact_dir)
        self.manifest_path = os.path.join(self.artifact_dir, "manifest.json")
        manifest = read_json(self.manifest_path, "manifest")
        if not isinstance(manifest, dict):
            raise ArtifactError(f"{self.manifest_path}: the manifest must be a JSON object")
        self.manifest = manifest
        model = require(manifest, "model", dict, self.manifest_path, "top level")
        self.model_name = str(model.get("name", ""))
        self._inputs = read_tensors(self.manifest_path, model, "inputs", "model")
        self._outputs = read_tensors(self.manifest_path, model, "outputs", "model", dynamic=True)
        self.simulator = MrvlSimulator(on_range_error, gemm=gemm, engine=engine, threads=threads)
        reader = StageReader(self.artifact_dir, self.manifest_path, self.simulator, threads,
                             log_severity)
        stages = require(manifest, "stages", list, self.manifest_path, "top level")
        check_stage_files(self.artifact_dir, manifest, self.manifest_path)
        self.stages = [reader.stage(k, s, alone=len(stages) == 1) for k, s in enumerate(stages)]
        # A float16 model's float16 inputs/outputs are float32 to the stages (computed_as).
        self._stage_inputs = [t.as_computed() for t in self._inputs]
        self._stage_outputs = [t.as_computed() for t in self._outputs]
        check_wiring(self.manifest_path, self._stage_inputs, self.stages, self._stage_outputs)
        self._widened = [(t.name, np.dtype(DTYPES[t.computed_as][0])) for t in self._inputs
                         if t.computed_as is not None]
        self._rounded = {t.name: np.dtype(DTYPES[t.dtype][0]) for t in self._outputs
                         if t.computed_as is not None}
        self._read_by_stages = {t.name for stage in self.stages for t in stage.inputs}
        self._known = {t.name for t in self._inputs} | {t.name for t in self.boundary_tensors}
        self._model_outputs = {t.name for t in self._outputs}
        self._output_names = [t.name for t in self._outputs]
        self._feed_specs = [(t.name, np.dtype(DTYPES[t.dtype][0]), t.shape) for t in self._inputs]
        self._pinned = _pinned_values(self.manifest_path, manifest, self._inputs)
        self.last_range_events: List[RangeEvent] = []
        # The whole model as one session (fused.py), opened by the first call that can use it.
        self._fused: Any = None
        self._fused_lock = threading.Lock()
        self.fused_reason = "not tried yet: the first run() tries it"

    # ----------------------------------------------------------- public API
    def get_inputs(self) -> List[NodeArg]:
        return [_node_arg(t) for t in self._inputs]

    def get_outputs(self) -> List[NodeArg]:
        return [_node_arg(t) for t in self._outputs]

    @property
    def input_specs(self) -> List[TensorSpec]:
        return list(self._inputs)

    @property
    def output_specs(self) -> List[TensorSpec]:
        return list(self._outputs)

    @property
    def pinned_values(self) -> Dict[str, np.ndarray]:
        """The inputs pinned at conversion (the manifest's ``options.values``), each as an array
        of its input's dtype and shape: the only value the artifact computes the model for."""
        return {name: value.copy() for name, value in self._pinned}

    @property
    def boundary_tensors(self) -> List[TensorSpec]:
        """Every tensor a stage produces, in run order (model outputs included)."""
        return [t for stage in self.stages for t in stage.outputs]

    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any], *,
            capture: bool = False) -> Any:
        """Outputs in ``output_names`` order (None: all model outputs). With ``capture=True``
        returns ``(outputs, tensors)``, ``tensors`` holding every model input and every
        stage-boundary tensor by name (what the comparison needs).

        Several threads may call ``run`` at once, as with ``InferenceSession.run``; numpy
        releases the GIL inside its calls, so they overlap (``benchmarks/bench_threads.py``).
        ``last_range_events`` holds the fp16 range events of the call that finished last."""
        env: Dict[str, np.ndarray] = self._stage_feed(self._check_feed(input_feed))
        if output_names is None and not capture:  # the common call, in few Python steps
            results = self._run_fused(env)
            if results is not None:
                self.last_range_events = []
                return self._as_given(self._output_names, results)
        names = [t.name for t in self._outputs] if output_names is None else list(output_names)
        for name in names:
            if name not in self._known:
                raise InputFeedError(f"{self.manifest_path}: requested output is neither a model "
                                     f"output nor a stage boundary tensor", tensor=name)
        if output_names is not None and not capture and self._model_outputs.issuperset(names):
            results = self._run_fused(env)
            if results is not None:
                self.last_range_events = []
                by_name = dict(zip(self._output_names, results))
                return self._as_given(names, [by_name[name] for name in names])
        self._run_stages(env)
        outputs = [env[name] for name in names]
        return (outputs, env) if capture else outputs

    @property
    def fused(self) -> bool:
        """Whether calls run as one onnxruntime session (``fused.py``, tried at the first
        call); ``fused_reason`` says why not."""
        return isinstance(self._fused, fused.FusedModel)

    def _run_fused(self, env: Dict[str, np.ndarray]) -> Optional[List[np.ndarray]]:
        """The model outputs from the fused session, in order; None when there is none, or when
        this call must run stage by stage (a range check failed: the stages name the layer)."""
        if self._fused is None:
            with self._fused_lock:
                if self._fused is None:
                    self._fused = self._open_fused()
        return self._fused.run(env) if self.fused else None

    def _open_fused(self) -> Any:
        made = fused.fuse(self.stages, self._stage_inputs, self._stage_outputs, self.threads,
                          self.log_severity)
        self.fused_reason = made if isinstance(made, str) else ""
        return made

    def run_layers(self, input_feed: Mapping[str, Any]) -> Tuple[Dict[str, np.ndarray],
                                                                 List[LayerOutput]]:
        """One run that also keeps every Mrvl layer's fp16 output: ``(tensors, layers)``, with
        ``tensors`` as ``run(..., capture=True)`` gives it and ``layers`` in run order (what
        ``compare(..., layers=True)`` needs to find the first layer that loses accuracy)."""
        env: Dict[str, np.ndarray] = self._stage_feed(self._check_feed(input_feed))
        trace: List[LayerOutput] = []
        self._run_stages(env, trace)
        return env, trace

    # --------------------------------------------------------- run helpers
    def _stage_feed(self, feed: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """``feed`` (a new dict) with each input the stages compute in another dtype widened
        to it (float16 -> float32: exact)."""
        if not self._widened:
            return feed
        widened = dict(feed)
        for name, dtype in self._widened:
            widened[name] = feed[name].astype(dtype)
        return widened

    def _as_given(self, names: Sequence[str], values: List[np.ndarray]) -> List[np.ndarray]:
        """Model outputs in the dtype the model as given declares (float16: rounded to nearest
        even, as onnxruntime's Cast does); other tensors as the stages made them."""
        if not self._rounded:
            return values
        return [v.astype(self._rounded[n]) if n in self._rounded else v
                for n, v in zip(names, values)]

    def _run_stages(self, env: Dict[str, np.ndarray],
                    trace: Optional[List[LayerOutput]] = None) -> None:
        events: List[RangeEvent] = []
        try:
            for stage in self.stages:
                env.update(self._run_stage(stage, env, events, trace))
        finally:
            self.last_range_events = events
        for name, dtype in self._rounded.items():  # every stage has run: none reads them now
            env[name] = env[name].astype(dtype)

    def _run_stage(self, stage: Stage, env: Dict[str, np.ndarray], events: List[RangeEvent],
                   trace: Optional[List[LayerOutput]] = None) -> Dict[str, np.ndarray]:
        feeds = [env[t.name] for t in stage.inputs]
        if stage.kind == "mrvl":
            runner: CompiledSubgraph = stage.runner
            layers: Optional[List[Tuple[LayerSpec, np.ndarray]]] = \
                None if trace is None else []
            results = runner.execute(feeds, events, trace=layers)
            results = [r if t.dtype == "float32" else r.astype(DTYPES[t.dtype][0])
                       for t, r in zip(stage.outputs, results)]
            if trace is not None:
                trace += [LayerOutput(stage.name, spec, value) for spec, value in layers]
        else:
            try:
                results = stage.runner.run(stage.output_names,
                                           {t.name: v for t, v in zip(stage.inputs, feeds)})
            except Exception as exc:  # onnxruntime's own untyped errors (a node it refuses)
                raise ArtifactError(f"{stage.file}: onnxruntime fails on CPU stage {stage.name}: "
                                    f"{_first_line(exc)}") from None
            _check_cpu_results(stage, results, self._read_by_stages)
        return {name: np.asarray(v) for name, v in zip(stage.output_names, results)}

    def _check_feed(self, feed: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        """The feed as a new dict of arrays, each of its input's exact dtype and shape."""
        if type(feed) is dict and len(feed) == len(self._feed_specs):
            checked = {}
            for name, dtype, shape in self._feed_specs:  # the common feed, checked quickly
                value = feed.get(name)
                if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape:
                    break
                checked[name] = value
            else:
                if self._pinned:  # rare: only an artifact converted with --input-value
                    self._check_pinned(checked)
                return checked
        checked = self._check_any_feed(feed)
        if self._pinned:
            self._check_pinned(checked)
        return checked

    def _check_pinned(self, feed: Mapping[str, np.ndarray]) -> None:
        for name, value in self._pinned:
            if not np.array_equal(feed[name], value):
                raise InputFeedError(
                    f"{self.manifest_path}: this input was pinned to {value.tolist()!r} at "
                    f"conversion (--input-value, the manifest's options.values) and "
                    f"{feed[name].tolist()!r} was given; the artifact computes the model for "
                    f"the pinned value only: feed that value, or convert again without pinning "
                    f"it to run others", tensor=name)

    def _check_any_feed(self, feed: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        if not isinstance(feed, Mapping):
            raise InputFeedError(f"input_feed must be a dict of input name -> array, got "
                                 f"{type(feed).__name__}")
        expected = {t.name: t for t in self._inputs}
        for name in feed:
            if name not in expected:
                raise InputFeedError(f"model {self.model_name!r} has no input of this name; its "
                                     f"inputs are {sorted(expected)}", tensor=name)
        checked = {}
        for name, spec in expected.items():
            if name not in feed:
                raise InputFeedError(f"input missing from the feed; expected "
                                     f"{DTYPES[spec.dtype][1]} of shape {list(spec.shape)}",
                                     tensor=name)
            checked[name] = _check_value(spec, feed[name])
        return checked


def _pinned_values(path: str, manifest: Mapping[str, Any],
                   inputs: Sequence[TensorSpec]) -> List[Tuple[str, np.ndarray]]:
    """The manifest's ``options.values`` as arrays of their inputs' dtypes and shapes."""
    options = manifest.get("options")
    values = options.get("values") if isinstance(options, dict) else None
    if not values:
        return []
    if not isinstance(values, dict):
        raise ArtifactError(f"{path}: options.values must be an object of input name -> value")
    specs = {t.name: t for t in inputs}
    pinned = []
    for name, value in values.items():
        spec = specs.get(name)
        if spec is None:
            raise ArtifactError(f"{path}: options.values names {name!r}, which is not a model "
                                f"input (inputs: {sorted(specs)})")
        try:
            array = np.asarray(value, DTYPES[spec.dtype][0]).reshape(spec.shape)
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"{path}: options.values[{name!r}] = {value!r} is not a value "
                                f"of shape {list(spec.shape)}: {exc}") from None
        pinned.append((name, array))
    return pinned


def _check_cpu_results(stage: Stage, results: Sequence[Any], read_later: Set[str]) -> None:
    """A later stage was built for the manifest's shapes, and onnxruntime computes its own. A
    model output is handed back as onnxruntime gives it, as ``InferenceSession`` would."""
    for spec, value in zip(stage.outputs, results):
        if spec.name in read_later and tuple(np.shape(value)) != spec.shape:
            raise ShapeError(
                f"{stage.file}: CPU stage {stage.name} gave shape {list(np.shape(value))} but the "
                f"manifest, from onnx's shape inference of the model, says {list(spec.shape)}: "
                "onnxruntime and onnx's shape inference disagree on this model (e.g. a ceil-mode "
                "pool whose last window starts past the input)", tensor=spec.name)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:400] if lines else type(exc).__name__


def _node_arg(spec: TensorSpec) -> NodeArg:
    return NodeArg(spec.name, list(spec.shape), DTYPES[spec.dtype][1])


def _check_value(spec: TensorSpec, value: Any) -> np.ndarray:
    """Exact dtype and shape, as onnxruntime demands them."""
    dtype, type_str = DTYPES[spec.dtype]
    array = np.asarray(value)
    if array.dtype != np.dtype(dtype):
        raise InputFeedError(f"dtype {array.dtype} given, expected {type_str} "
                             f"({np.dtype(dtype).name}) of shape {list(spec.shape)}",
                             tensor=spec.name)
    if tuple(array.shape) != spec.shape:
        raise InputFeedError(f"shape {list(array.shape)} given, expected {list(spec.shape)}",
                             tensor=spec.name)
    return array
