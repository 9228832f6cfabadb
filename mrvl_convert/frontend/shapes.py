"""Static shapes for the tensors shape inference leaves unknown.

Any tensor may become a stage boundary, and a boundary's shape in the manifest must be static
(the runtime allocates it, the backend compiles for it). ONNX shape inference leaves a shape
unknown after an op it has no rule for (``com.microsoft`` ops such as ``Gelu``), or a dim it
cannot propagate; the inputs are static by now, so onnxruntime computes these tensors on zeros of
the input shapes, and again on ones: a shape both runs agree on is the tensor's shape; one they
disagree on depends on the input values (``NonZero``...) and stays unknown, as does one
onnxruntime cannot compute. When the runs fail on an ``If`` (a branch that does not fit the
input shapes, chosen on zeros: a recurrent model's branch for another sample rate), they are
made again with every If's condition forced true, then false: a shape all the runs that
succeed agree on is the tensor's shape for any input that onnxruntime runs the model on, a
branch that fails on zeros and ones of the input shapes being one it does not run on them.
A tensor of ``unsure`` (after a control-flow node onnx cannot infer: ``shape_failures.py``) is
never given a dim onnx did not infer: how many times a Loop runs, and so a decoded sequence's
length, may agree on zeros and ones and differ on another input; it keeps its rank, where the
runs agree on it, with its other dims None. A stage boundary or model output still unknown is a ShapeError
naming the tensor (``canonicalize`` and ``emit.documents``), never an artifact that does not load.
"""
from __future__ import annotations

from typing import Collection, Dict, List, Optional, Sequence

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape

# onnxruntime log severities: a run that fails is reported by our own error, not its log line.
_FATAL_ONLY, _WARNINGS = 4, 2


def unknown_tensors(graph: gs.Graph) -> List[gs.Tensor]:
    """Node outputs and graph outputs without a static shape, once each, in graph order."""
    seen: Dict[str, gs.Tensor] = {}
    for tensor in [t for n in graph.nodes for t in n.outputs] + list(graph.outputs):
        if tensor.name and not isinstance(tensor, gs.Constant) and static_shape(tensor) is None:
            seen.setdefault(tensor.name, tensor)
    return list(seen.values())


def resolve_shapes(graph: gs.Graph, ir_version: int, *, blocked: Collection[str] = (),
                   verbose: bool = False, unsure: Collection[str] = ()) -> Dict[str, str]:
    """Give every tensor of ``unknown_tensors(graph)`` the static shape (and, if unknown, the
    dtype) onnxruntime computes; returns the tensors left unknown, each with the reason. The run
    is skipped when it would compute a node of ``blocked`` (constants too large to fold)."""
    unknown = unknown_tensors(graph)
    if not unknown:
        return {}
    part = graph.copy()
    tensors = part.tensors()
    part.outputs = [tensors[t.name] for t in unknown]
    part.cleanup(remove_unused_graph_inputs=False)
    heavy = sorted(n.name for n in part.nodes if n.name in blocked)
    if heavy:
        why = (f"computing it would run node {heavy[0]!r}, whose output is too large to "
               "compute at conversion time")
        return {t.name: why for t in unknown}
    runs = _run(part, ir_version, verbose)
    branches: List[str] = []
    if isinstance(runs, str):
        runs, branches = _run_each_branch(part, ir_version, verbose, runs)
    if isinstance(runs, str):
        return {t.name: runs for t in unknown}
    unresolved: Dict[str, str] = {}
    for tensor, results in zip(unknown, zip(*runs)):
        shapes = [list(r.shape) for r in results]
        if tensor.name in unsure:
            unresolved[tensor.name] = _rank_only(tensor, shapes, results[0].dtype)
            continue
        if any(shape != shapes[0] for shape in shapes):
            unresolved[tensor.name] = _disagreement(shapes, branches)
            continue
        tensor.shape = [int(d) for d in shapes[0]]
        if tensor.dtype is None:
            tensor.dtype = results[0].dtype
    return unresolved


def _rank_only(tensor: gs.Tensor, shapes: List[List[int]], dtype: np.dtype) -> str:
    """``tensor`` with the dims onnx inferred and None for the others, where the runs agree on
    its rank (a model output's manifest entry needs it); why its shape stays unknown."""
    known = tensor.shape if tensor.shape is not None else [None] * len(shapes[0])
    if all(len(s) == len(known) for s in shapes):
        tensor.shape = [d if isinstance(d, int) and d >= 0 else None for d in known]
    if tensor.dtype is None:
        tensor.dtype = dtype
    return "it comes after a node whose shapes onnx cannot infer: no run can vouch for its shape"


def _disagreement(shapes: List[List[int]], branches: List[str]) -> str:
    if not branches:
        return (f"its shape depends on the input values ({shapes[0]} for zeros, {shapes[1]} "
                "for ones)")
    runs = ", ".join(f"{s} ({b})" for s, b in zip(shapes, branches))
    return f"its shape depends on the input values or on the branch an If takes: {runs}"


def _run_each_branch(part: gs.Graph, ir_version: int, verbose: bool, why: str):
    """When the runs fail and ``part`` has Ifs: the runs with every If's condition forced true,
    then false, of those that succeed (and a name for each run), or ``why``. A branch that
    fails on zeros and ones of the input shapes is one onnxruntime does not run on them; the
    shape the others agree on is the one any run that succeeds gives (for such inputs)."""
    if not any(n.op == "If" for n in part.nodes):
        return why, []
    runs: List[List[np.ndarray]] = []
    names: List[str] = []
    for choice in (True, False):
        forced = part.copy()
        for node in forced.nodes:
            if node.op == "If" and not isinstance(node.inputs[0], gs.Constant):
                node.inputs[0] = gs.Constant(f"{node.name}_forced", np.array(choice))
        result = _run(forced, ir_version, verbose)
        if isinstance(result, str):
            continue
        runs += result
        branch = "then" if choice else "else"
        names += [f"{branch} branch on zeros", f"{branch} branch on ones"]
    return (runs, names) if runs else (why, [])


def _run(part: gs.Graph, ir_version: int, verbose: bool):
    """The outputs of ``part`` on zeros and on ones of its inputs, or why they cannot be had."""
    import onnxruntime as ort
    try:
        proto = gs.export_onnx(part, do_type_check=False)
        proto.ir_version = ir_version
        options = ort.SessionOptions()
        options.log_severity_level = _WARNINGS if verbose else _FATAL_ONLY
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        # Idle workers sleep: spinning between a whole model's ops was ~90% of this run's CPU
        # (slanet-plus: 0.55 s of 0.6, issue 45); only the shapes of the outputs are read.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(proto.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        names = [t.name for t in part.outputs]
        return [session.run(names, _feeds(part.inputs, fill)) for fill in (0, 1)]
    except Exception as exc:  # onnxruntime's errors have no common base class
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        return (f"shape inference cannot tell its shape and onnxruntime cannot compute it on "
                f"zeros of the input shapes ({text})")


def _feeds(inputs: Sequence[gs.Tensor], fill: int) -> Dict[str, np.ndarray]:
    return {t.name: np.full(static_shape(t) or [], fill, dtype=_dtype(t.dtype))
            for t in inputs}


def _dtype(dtype: Optional[object]) -> np.dtype:
    return np.dtype(dtype if dtype is not None else np.float32)
