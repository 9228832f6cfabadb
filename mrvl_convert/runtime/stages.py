"""An artifact's manifest read into stages: the tensors at every boundary and each stage's runner.

- requires: the artifact directory and its parsed ``manifest.json``;
- ensures: every tensor entry a ``TensorSpec`` of a known dtype; every Mrvl stage compiled on the
  simulator and agreeing with its Nodes-JSON (input names and shapes, output shapes, float32 or
  int8 at the boundary); every CPU stage opened in onnxruntime and agreeing with its ONNX file;
  every file named inside the artifact directory; every tensor read after a stage makes it, as
  it was made (``check_wiring``). Anything else raises ``ArtifactError`` naming the manifest, the
  stage and the tensor.

Running the stages is ``session.py``'s ``HybridSession``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.core.artifact import dims_of, require, shape_of
from mrvl_convert.core.paths import confined
from mrvl_convert.errors import ArtifactError
from mrvl_convert.runtime.chunked import ChunkedSubgraph
from mrvl_convert.runtime.options import cpu_session_options
from mrvl_convert.runtime.simulator import CompiledSubgraph, MrvlSimulator

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
class TensorSpec:
    name: str
    shape: Tuple[int, ...]
    dtype: str
    # a model input/output the stages take or give in another dtype (the manifest's computed_as)
    computed_as: Optional[str] = None

    def as_computed(self) -> "TensorSpec":
        """The tensor as the stages see it."""
        return self if self.computed_as is None else TensorSpec(self.name, self.shape,
                                                                self.computed_as)


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


def read_tensors(manifest_path: str, doc: Dict[str, Any], key: str, where: str,
                 name_key: str = "name", dynamic: bool = False) -> List[TensorSpec]:
    """The tensor entries ``doc[key]`` of the manifest (the model's or a stage's); ``dynamic``:
    a dim may be None (a model output only the run sizes, a CPU stage's that gives it)."""
    entries = require(doc, key, list, manifest_path, where)
    specs = []
    for k, entry in enumerate(entries):
        place = f"{where} {key}[{k}]"
        if not isinstance(entry, dict):
            raise ArtifactError(f"{manifest_path}: {place} must be an object")
        name = require(entry, name_key, str, manifest_path, place)
        shape = (dims_of if dynamic else shape_of)(entry.get("shape"), manifest_path,
                                                   f"{place}.shape")
        dtype = entry.get("dtype", "float32")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise ArtifactError(f"{manifest_path}: {place} ({name}): dtype {dtype!r} "
                                f"is not one of {sorted(DTYPES)}")
        computed = entry.get("computed_as")
        if computed is not None and (not isinstance(computed, str) or computed not in DTYPES):
            raise ArtifactError(f"{manifest_path}: {place} ({name}): computed_as {computed!r} "
                                f"is not one of {sorted(DTYPES)}")
        specs.append(TensorSpec(name, shape, dtype, computed))
    return specs


class StageReader:
    """Opens the stages of one manifest: Mrvl stages on ``simulator``, CPU stages on
    onnxruntime with ``threads`` intra-op threads at ``log_severity``."""

    def __init__(self, artifact_dir: str, manifest_path: str, simulator: MrvlSimulator,
                 threads: int, log_severity: int) -> None:
        self.artifact_dir = artifact_dir
        self.manifest_path = manifest_path
        self.simulator = simulator
        self.threads = threads
        self.log_severity = log_severity
        self._cpu_options: Any = None  # made with the first CPU stage: onnxruntime is optional

    def stage(self, k: int, doc: Any, alone: bool) -> Stage:
        """Manifest entry ``stages[k]``, its runner open. ``alone``: the model's only stage."""
        where = f"stages[{k}]"
        if not isinstance(doc, dict):
            raise ArtifactError(f"{self.manifest_path}: {where} must be an object")
        kind = require(doc, "kind", str, self.manifest_path, where)
        name = str(doc.get("name", where))
        inputs = read_tensors(self.manifest_path, doc, "inputs", f"stage {name}", "tensor")
        outputs = read_tensors(self.manifest_path, doc, "outputs", f"stage {name}", "tensor",
                               dynamic=kind == "cpu")
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
                      outputs: List[TensorSpec], alone: bool) -> Any:
        compiled = self.simulator.compile(self._file(doc, "nodes_json", name),
                                          self._file(doc, "consts_json", name), alone=alone)
        for spec in inputs + outputs:
            # A Nodes-JSON computes float32 tensors, and int8 ones inside an int8 region (as
            # float32 arrays of integers), which may cross a stage boundary.
            if spec.dtype not in MRVL_DTYPES:
                raise ArtifactError(f"{self.manifest_path}: stage {name}: tensor {spec.name!r} "
                                    f"is declared {spec.dtype}, but Mrvl stages take and give "
                                    "float32 (or int8 in an int8 region)")
        runs = _runs(doc, self.manifest_path, name)
        stated = [(t.name, t.shape) for t in inputs]
        actual = [(n.name, _times(n.shape, runs)) for n in compiled.inputs]
        if stated != actual:
            raise ArtifactError(f"{self.manifest_path}: stage {name}: inputs {stated} do not "
                                f"match the Nodes-JSON input nodes {actual} (arg_nodes order"
                                f"{f', axis 0 times its {runs} runs' if runs > 1 else ''})")
        stated_out = [t.shape for t in outputs]
        heads = [_times(tuple(s), runs) for s in compiled.output_shapes]
        if stated_out != heads:
            raise ArtifactError(f"{self.manifest_path}: stage {name}: output shapes {stated_out} "
                                f"do not match the Nodes-JSON heads {heads}")
        return compiled if runs == 1 else ChunkedSubgraph(compiled, runs)

    def _open_cpu(self, path: str, name: str, inputs: List[TensorSpec],
                  outputs: List[TensorSpec]) -> Any:
        import onnxruntime as ort  # imported here so the simulator alone does not need it

        if self._cpu_options is None:
            self._cpu_options = cpu_session_options(self.threads, self.log_severity)
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


def _runs(doc: Dict[str, Any], manifest_path: str, name: str) -> int:
    """A Mrvl stage's ``runs`` (1 when absent): how many chunks of its batch its layers take."""
    runs = doc.get("runs", 1)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ArtifactError(f"{manifest_path}: stage {name}: runs {runs!r} is not a whole "
                            "number >= 1")
    return runs


def _times(shape: Tuple[int, ...], runs: int) -> Tuple[int, ...]:
    """A Nodes-JSON shape as the stage sees it: axis 0 times the runs."""
    return shape if runs == 1 or not shape else (shape[0] * runs, *shape[1:])


def check_wiring(manifest_path: str, inputs: Sequence[TensorSpec], stages: Sequence[Stage],
                 outputs: Sequence[TensorSpec]) -> None:
    """Every tensor is read after it is made, and as it was made (shape and dtype)."""
    available = {t.name: t for t in inputs}
    for stage in stages:
        for t in stage.inputs:
            if t.name not in available:
                raise ArtifactError(f"{manifest_path}: stage {stage.name} reads tensor "
                                    f"{t.name!r} before any stage produces it")
            _same_spec(manifest_path, available[t.name], t, f"stage {stage.name}")
        available.update({t.name: t for t in stage.outputs})
    for t in outputs:
        if t.name not in available:
            raise ArtifactError(f"{manifest_path}: model output {t.name!r} is not "
                                f"produced by any stage")
        _same_spec(manifest_path, available[t.name], t, "model outputs")


def _same_spec(manifest_path: str, made: TensorSpec, read: TensorSpec, where: str) -> None:
    if (made.shape, made.dtype) != (read.shape, read.dtype):
        raise ArtifactError(f"{manifest_path}: {where}: tensor {read.name!r} is declared "
                            f"{read.dtype} {list(read.shape)} but made as {made.dtype} "
                            f"{list(made.shape)}")


def _check_against_onnx(spec: TensorSpec, arg: Any, path: str, stage: str) -> None:
    """The manifest's view of a CPU stage boundary must be the ONNX file's own."""
    type_str = DTYPES[spec.dtype][1]
    static = [d if isinstance(d, int) else None for d in (arg.shape or [])]
    shape_ok = len(static) == len(spec.shape) and all(
        d is None or want is None or d == want for d, want in zip(static, spec.shape))
    if arg.type != type_str or not shape_ok:
        raise ArtifactError(f"{path}: CPU stage {stage}: tensor {spec.name!r} is {arg.type} "
                            f"{arg.shape} in the ONNX file but the manifest says {type_str} "
                            f"{list(spec.shape)}")
