"""HybridSession: run a converted artifact directory like an onnxruntime InferenceSession.

Stages run in manifest order: Mrvl stages on the fp16 simulator (compiled once, here), CPU stages
on ``onnxruntime.InferenceSession`` (created once, here). Tensors flow between stages by their
ONNX names through one environment dict.

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
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from mrvl_convert.core.paths import confined
from mrvl_convert.errors import ArtifactError, InputFeedError, ShapeError
from mrvl_convert.core.artifact import read_json, require, shape_of
from mrvl_convert.core.file_hashes import check_stage_files
from mrvl_convert.kernels.gemm import GemmEngine
from mrvl_convert.kernels.layerspec import LayerSpec
from mrvl_convert.runtime.graph_engine import session_options
from mrvl_convert.runtime.simulator import CompiledSubgraph, MrvlSimulator, RangeEvent

# onnxruntime's log levels: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal.
QUIET, WARNINGS = 3, 2

# manifest dtype -> (numpy dtype, onnxruntime type string)
DTYPES: Dict[str, Tuple[Any, str]] = {
    "float32": (np.float32, "tensor(float)"), "float16": (np.float16, "tensor(float16)"),
    "float64": (np.float64, "tensor(double)"), "int64": (np.int64, "tensor(int64)"),
    "int32": (np.int32, "tensor(int32)"), "int8": (np.int8, "tensor(int8)"),
    "uint8": (np.uint8, "tensor(uint8)"), "bool": (np.bool_, "tensor(bool)"),
}


# What a Mrvl stage may take and give at its boundary.
MRVL_DTYPES = ("float32", "int8")


@dataclass(frozen=True)
class NodeArg:
    """Like onnxruntime.NodeArg: name, shape, type ('tensor(float)')."""

    name: str
    shape: List[int]
    type: str


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: Tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class LayerOutput:
    """One Mrvl layer's fp16 output from one run, in the simulator's physical layout."""

    stage: str
    spec: LayerSpec
    value: np.ndarray


@dataclass
class Stage:
    kind: str
    name: str
    inputs: List[TensorSpec]
    outputs: List[TensorSpec]
    runner: Any  # CompiledSubgraph or onnxruntime.InferenceSession
    file: str = ""  # the CPU stage's ONNX file, for errors
    # what a CPU stage asks onnxruntime for, in order: made once here, not at every run
    output_names: Tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.output_names = tuple(t.name for t in self.outputs)


class HybridSession:
    """Runs an artifact directory written by ``mrvl_convert.convert``."""

    def __init__(self, artifact_dir: "str | os.PathLike[str]", *,
                 on_range_error: str = "raise", gemm: "str | GemmEngine" = "numpy",
                 threads: int = 0, log_severity: int = QUIET, engine: str = "graph") -> None:
        """``gemm``: which library runs the simulator's matrix products, ``"numpy"`` or
        ``"onnxruntime"`` (see ``mrvl_convert/runtime/gemm.py``); the fp16 number model is the
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
        self._inputs = self._tensors(model, "inputs", "model")
        self._outputs = self._tensors(model, "outputs", "model")
        self.simulator = MrvlSimulator(on_range_error, gemm=gemm, engine=engine, threads=threads)
        self._cpu_options: Any = None  # made with the first CPU stage: onnxruntime is optional
        stages = require(manifest, "stages", list, self.manifest_path, "top level")
        check_stage_files(self.artifact_dir, manifest, self.manifest_path)
        self.stages = [self._stage(k, s, alone=len(stages) == 1) for k, s in enumerate(stages)]
        self._check_wiring()
        self._read_by_stages = {t.name for stage in self.stages for t in stage.inputs}
        self._known = {t.name for t in self._inputs} | {t.name for t in self.boundary_tensors}
        self.last_range_events: List[RangeEvent] = []

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
        names = [t.name for t in self._outputs] if output_names is None else list(output_names)
        env: Dict[str, np.ndarray] = dict(self._check_feed(input_feed))
        for name in names:
            if name not in self._known:
                raise InputFeedError(f"{self.manifest_path}: requested output is neither a model "
                                     f"output nor a stage boundary tensor", tensor=name)
        self._run_stages(env)
        outputs = [env[name] for name in names]
        return (outputs, env) if capture else outputs

    def run_layers(self, input_feed: Mapping[str, Any]) -> Tuple[Dict[str, np.ndarray],
                                                                 List[LayerOutput]]:
        """One run that also keeps every Mrvl layer's fp16 output: ``(tensors, layers)``, with
        ``tensors`` as ``run(..., capture=True)`` gives it and ``layers`` in run order (what
        ``compare(..., layers=True)`` needs to find the first layer that loses accuracy)."""
        env: Dict[str, np.ndarray] = dict(self._check_feed(input_feed))
        trace: List[LayerOutput] = []
        self._run_stages(env, trace)
        return env, trace

    # --------------------------------------------------------- run helpers
    def _run_stages(self, env: Dict[str, np.ndarray],
                    trace: Optional[List[LayerOutput]] = None) -> None:
        events: List[RangeEvent] = []
        try:
            for stage in self.stages:
                env.update(self._run_stage(stage, env, events, trace))
        finally:
            self.last_range_events = events

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

    # ------------------------------------------------------ manifest reading
    def _tensors(self, doc: Dict[str, Any], key: str, where: str,
                 name_key: str = "name") -> List[TensorSpec]:
        entries = require(doc, key, list, self.manifest_path, where)
        specs = []
        for k, entry in enumerate(entries):
            place = f"{where} {key}[{k}]"
            if not isinstance(entry, dict):
                raise ArtifactError(f"{self.manifest_path}: {place} must be an object")
            name = require(entry, name_key, str, self.manifest_path, place)
            shape = shape_of(entry.get("shape"), self.manifest_path, f"{place}.shape")
            dtype = entry.get("dtype", "float32")
            if not isinstance(dtype, str) or dtype not in DTYPES:
                raise ArtifactError(f"{self.manifest_path}: {place} ({name}): dtype {dtype!r} "
                                    f"is not one of {sorted(DTYPES)}")
            specs.append(TensorSpec(name, shape, dtype))
        return specs

    def _stage(self, k: int, doc: Any, alone: bool) -> Stage:
        where = f"stages[{k}]"
        if not isinstance(doc, dict):
            raise ArtifactError(f"{self.manifest_path}: {where} must be an object")
        kind = require(doc, "kind", str, self.manifest_path, where)
        name = str(doc.get("name", where))
        inputs = self._tensors(doc, "inputs", f"stage {name}", "tensor")
        outputs = self._tensors(doc, "outputs", f"stage {name}", "tensor")
        if kind == "mrvl":
            return Stage(kind, name, inputs, outputs,
                         self._compile_mrvl(doc, name, inputs, outputs, alone))
        if kind == "cpu":
            path = self._file(doc, "onnx", name)
            return Stage(kind, name, inputs, outputs, self._open_cpu(path, name, inputs, outputs),
                         path)
        raise ArtifactError(f"{self.manifest_path}: {where} ({name}): kind {kind!r} is "
                            f"neither 'mrvl' nor 'cpu'")

    def _file(self, doc: Dict[str, Any], key: str, stage: str) -> str:
        rel = require(doc, key, str, self.manifest_path, f"stage {stage}")
        path = str(confined(self.artifact_dir, rel, error=ArtifactError,
                            what=f"{self.manifest_path}: stage {stage}: field '{key}'"))
        if not os.path.isfile(path):
            raise ArtifactError(f"{self.manifest_path}: stage {stage}: field '{key}' names "
                                f"{rel!r}, which is not in {self.artifact_dir}")
        return path

    def _compile_mrvl(self, doc: Dict[str, Any], name: str, inputs: List[TensorSpec],
                      outputs: List[TensorSpec], alone: bool) -> CompiledSubgraph:
        compiled = self.simulator.compile(self._file(doc, "nodes_json", name),
                                          self._file(doc, "consts_json", name), alone=alone)
        for spec in inputs + outputs:
            # A Nodes-JSON computes float32 tensors, and int8 ones inside an int8 region (as
            # float32 arrays of integers), which may cross a stage boundary.
            if spec.dtype not in MRVL_DTYPES:
                raise ArtifactError(f"{self.manifest_path}: stage {name}: tensor {spec.name!r} "
                                    f"is declared {spec.dtype}, but Mrvl stages take and give "
                                    "float32 (or int8 in an int8 region)")
        stated = [(t.name, t.shape) for t in inputs]
        actual = [(n.name, n.shape) for n in compiled.inputs]
        if stated != actual:
            raise ArtifactError(f"{self.manifest_path}: stage {name}: inputs {stated} do not "
                                f"match the Nodes-JSON input nodes {actual} (arg_nodes order)")
        stated_out = [t.shape for t in outputs]
        if stated_out != [tuple(s) for s in compiled.output_shapes]:
            raise ArtifactError(f"{self.manifest_path}: stage {name}: output shapes {stated_out} "
                                f"do not match the Nodes-JSON heads {compiled.output_shapes}")
        return compiled

    def _open_cpu(self, path: str, name: str, inputs: List[TensorSpec],
                  outputs: List[TensorSpec]) -> Any:
        import onnxruntime as ort  # imported here so the simulator alone does not need it

        if self._cpu_options is None:
            self._cpu_options = _cpu_session_options(self.threads, self.log_severity)
        try:
            session = ort.InferenceSession(path, self._cpu_options,
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own untyped exceptions
            raise ArtifactError(f"{path}: onnxruntime cannot load CPU stage {name}: {exc}") \
                from None
        graph_in = {i.name for i in session.get_inputs()}
        graph_out = {o.name for o in session.get_outputs()}
        if graph_in != {t.name for t in inputs} or not {t.name for t in outputs} <= graph_out:
            raise ArtifactError(f"{path}: CPU stage {name}: graph inputs {sorted(graph_in)} / "
                                f"outputs {sorted(graph_out)} do not match the manifest's "
                                f"{[t.name for t in inputs]} / {[t.name for t in outputs]}")
        declared = {a.name: a for a in list(session.get_inputs()) + list(session.get_outputs())}
        for spec in inputs + outputs:
            _check_against_onnx(spec, declared[spec.name], path, name)
        return session

    def _check_wiring(self) -> None:
        """Every tensor is read after it is made, and as it was made (shape and dtype)."""
        available = {t.name: t for t in self._inputs}
        for stage in self.stages:
            for t in stage.inputs:
                if t.name not in available:
                    raise ArtifactError(f"{self.manifest_path}: stage {stage.name} reads tensor "
                                        f"{t.name!r} before any stage produces it")
                self._same_spec(available[t.name], t, f"stage {stage.name}")
            available.update({t.name: t for t in stage.outputs})
        for t in self._outputs:
            if t.name not in available:
                raise ArtifactError(f"{self.manifest_path}: model output {t.name!r} is not "
                                    f"produced by any stage")
            self._same_spec(available[t.name], t, "model outputs")

    def _same_spec(self, made: TensorSpec, read: TensorSpec, where: str) -> None:
        if (made.shape, made.dtype) != (read.shape, read.dtype):
            raise ArtifactError(f"{self.manifest_path}: {where}: tensor {read.name!r} is declared "
                                f"{read.dtype} {list(read.shape)} but made as {made.dtype} "
                                f"{list(made.shape)}")


def ort_options(log_severity: int = QUIET) -> Any:
    """SessionOptions at this log level: every session the library opens takes its options
    from here, so onnxruntime's warnings (``[W:onnxruntime:...]``) reach the terminal only when
    asked for (``mrvl-convert -v``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = log_severity
    return options


def _cpu_session_options(threads: int, log_severity: int = QUIET) -> Any:
    """One SessionOptions for every CPU stage, as for the graph engine's segments, running
    QDQ models as they are written (``qdq_as_written``)."""
    return qdq_as_written(session_options(threads, log_severity))


def qdq_as_written(options: Any) -> Any:
    """``options`` with onnxruntime's QDQ fusion off: DequantizeLinear, the float op and
    QuantizeLinear run as the model writes them. Why: the fused int8 kernels onnxruntime picks
    instead (QLinearConv, ...) equal that on ARM (the OCTEON's cores) and on x86 with VNNI, but
    on x86 with AVX2 only they sum pairs of products in saturating int16 (``vpmaddubsw``) and
    land many int8 steps away; a model without Q/DQ nodes is not affected."""
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    return options


def _check_against_onnx(spec: TensorSpec, arg: Any, path: str, stage: str) -> None:
    """The manifest's view of a CPU stage boundary must be the ONNX file's own."""
    type_str = DTYPES[spec.dtype][1]
    static = [d if isinstance(d, int) else None for d in (arg.shape or [])]
    shape_ok = len(static) == len(spec.shape) and all(
        d is None or d == want for d, want in zip(static, spec.shape))
    if arg.type != type_str or not shape_ok:
        raise ArtifactError(f"{path}: CPU stage {stage}: tensor {spec.name!r} is {arg.type} "
                            f"{arg.shape} in the ONNX file but the manifest says {type_str} "
                            f"{list(spec.shape)}")


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
