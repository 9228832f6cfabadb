"""Compare a converted artifact (hybrid fp16 run) with the original model on fp32 onnxruntime.

The verdict is that of the model's outputs, as Polygraphy gives it: a model whose outputs are
within tolerance passes. Every tensor that crosses a stage boundary is compared too, as a
diagnostic, so a disagreement is located at the first stage that introduces it. With
``layers=True`` every Mrvl layer inside a stage is compared as well, against the tensor its last
ONNX source node produces in the original model (NHWC turned back to NCHW), so it is located at
the first layer. fp16 range events (inf/NaN inside a stage) are reported; they fail the verdict
only through the outputs they spoil.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import onnx
import onnxruntime as ort

from mrvl_convert.errors import ModelLoadError, ShapeError
from mrvl_convert.frontend.load import static_dim
from mrvl_convert.verify.layer_compare import RESHAPE_LAYERS, LayerPlan, layer_plans, layer_values
from mrvl_convert.runtime.session import DTYPES, QUIET, HybridSession, TensorSpec, ort_options, qdq_as_written
from mrvl_convert.runtime.simulator import Fp16RangeWarning
from mrvl_convert.verify.tolerances import Tolerance, Tolerances

Feed = Dict[str, np.ndarray]
_OVERFLOW_NOTE = "hybrid value holds inf/NaN (fp16 overflow)"


@dataclass
class Row:
    """The comparison of one tensor over all samples."""

    tensor: str
    kind: str  # "output" (the verdict) | "boundary" | "layer" (diagnostics)
    shape: List[int]
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    cosine: Optional[float] = None
    top1: Optional[float] = None
    tolerance: Optional[Dict[str, Any]] = None
    passed: bool = True
    note: str = ""


@dataclass
class Comparison:
    rows: List[Row]
    samples: int
    range_events: List[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(row.passed for row in self.judged_rows)

    @property
    def judged_rows(self) -> List[Row]:
        """The rows the verdict is made of: the model's outputs."""
        return [row for row in self.rows if row.kind == "output"]

    @property
    def boundaries_over(self) -> List[Row]:
        """Boundary rows outside their tolerance (diagnostics), in run order."""
        return [row for row in self.rows if row.kind == "boundary" and not row.passed]

    @property
    def first_layer_over(self) -> Optional[Row]:
        """The first layer row, in run order, outside its tolerance (None if none is)."""
        return next((r for r in self.rows if r.kind == "layer" and not r.passed), None)

    def to_dict(self) -> Dict[str, Any]:
        first = self.first_layer_over
        return {"passed": self.passed, "samples": self.samples,
                "range_events": list(self.range_events),
                "first_layer_over": None if first is None else first.tensor,
                "rows": [asdict(r) for r in self.rows]}

    def summary_line(self) -> str:
        """One line for a batch log: the verdict and the worst figures over all tensors."""
        verdict = "PASS" if self.passed else "FAIL"
        rows = self.judged_rows
        worst = max(rows, key=lambda r: r.max_rel or 0.0, default=None)
        parts = [f"{verdict} over {self.samples} sample(s), {len(rows)} output(s)"]
        if worst is not None and worst.max_rel is not None:
            parts.append(f"worst max_abs {worst.max_abs:.3g}, max_rel {worst.max_rel:.3g} "
                         f"({worst.tensor})")
        failing = [r.tensor for r in rows if not r.passed]
        if failing:
            parts.append(f"outside tolerance: {', '.join(failing[:5])}")
        cosines = [r.cosine for r in rows if r.cosine is not None]
        if cosines:
            parts.append(f"min cosine {min(cosines):.6f}")
        top1 = [r.top1 for r in rows if r.top1 is not None]
        if top1:
            parts.append(f"top-1 agreement {min(top1):.4f}")
        over = self.boundaries_over
        if over:
            parts.append(f"{len(over)} stage-boundary tensor(s) over tolerance, first "
                         f"{over[0].tensor} (diagnostic)")
        parts += [f"fp16 range: {e}" for e in self.range_events]
        return "; ".join(parts)

    def format_table(self) -> str:
        header = ("tensor", "kind", "shape", "max_abs", "max_rel", "cosine", "top1",
                  "tol atol/rel/cos/top1", "ok")
        lines = [header] + [_table_cells(row) for row in self.rows]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        text = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
        text.insert(1, "  ".join("-" * w for w in widths))
        for event in self.range_events:
            text.append(f"fp16 range: {event}")
        verdict = "PASS" if self.passed else "FAIL"
        rows = self.judged_rows
        text.append(f"{verdict}: {sum(r.passed for r in rows)}/{len(rows)} outputs "
                    f"within tolerance over {self.samples} sample(s)")
        if self.boundaries_over:
            text.append("boundary rows are diagnostics, not part of the verdict; the first "
                        f"boundary tensor outside tolerance is {self.boundaries_over[0].tensor}")
        if any(row.kind == "layer" for row in self.rows):
            first = self.first_layer_over
            text.append("layer rows are diagnostics, not part of the verdict; " + (
                "every compared layer is within tolerance" if first is None else
                f"the first layer outside tolerance is {first.tensor} ({first.note})"))
        return "\n".join(text)


def compare(model: "str | os.PathLike[str] | onnx.ModelProto",
            artifact_dir: "str | os.PathLike[str]",
            inputs: Union[None, Mapping[str, Any], Sequence[Mapping[str, Any]]] = None, *,
            tolerances: Union[None, Tolerances, Mapping[str, Any]] = None, seed: int = 0,
            samples: int = 1, gemm: str = "numpy", layers: bool = False,
            log_severity: int = QUIET, engine: str = "graph") -> Comparison:
    """Run the original fp32 model and the hybrid artifact on the same inputs and compare every
    boundary tensor and output. ``inputs``: a feed dict, a list of them, or None for ``samples``
    seeded random feeds of the manifest's shapes. ``gemm`` and ``engine``: how the simulator
    runs (``HybridSession``; the per-layer comparison always runs layer by layer). ``layers``: also compare every Mrvl layer (module docstring).
    ``log_severity``: onnxruntime's log level for the sessions opened here (3: errors only,
    2: warnings too)."""
    tols = tolerances if isinstance(tolerances, Tolerances) else Tolerances.from_dict(tolerances)
    session = HybridSession(artifact_dir, on_range_error="warn", gemm=gemm,
                            log_severity=log_severity, engine=engine)
    feeds = _feeds(session, inputs, seed, samples)
    outputs = {t.name for t in session.output_specs}
    specs = _compared_tensors(session)
    proto = _load(model)
    _check_model_inputs(proto, session, str(model) if not isinstance(model, onnx.ModelProto)
                        else (model.graph.name or "<ModelProto>"))
    present = _tensor_names(proto)
    judged = [s for s in specs if s.name in present]
    plans = layer_plans(session, proto, {s.name for s in specs}) if layers else []
    traced = [p for p in plans if not p.skip]
    types = _element_types(proto) if traced else {}
    reference = _reference_session(proto, judged + [
        TensorSpec(p.tensor, (), types.get(p.tensor, "float32")) for p in traced], log_severity)
    names = [s.name for s in judged]
    got: Dict[str, List[np.ndarray]] = {n: [] for n in names}
    want: Dict[str, List[np.ndarray]] = {n: [] for n in names}
    # Layer outputs are folded into running worst cases sample by sample: kept for every
    # sample, a ResNet-50's would take some 40 MB per sample.
    worst = {p.tensor: _Worst() for p in traced}
    events: List[str] = []
    for feed in feeds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Fp16RangeWarning)  # recorded below instead
            env, trace = session.run_layers(feed) if traced else \
                (session.run(None, feed, capture=True)[1], [])
        events += [e.describe() for e in session.last_range_events]
        results = _run_reference(reference, names + [p.tensor for p in traced], feed, proto)
        values = layer_values(traced, trace, {p.tensor: np.shape(r) for p, r in
                                              zip(traced, results[len(names):])})
        for name, value in zip(names, results):
            want[name].append(np.asarray(value))
            got[name].append(env[name])
        for plan, value in zip(traced, results[len(names):]):
            worst[plan.tensor].add(values[plan.tensor], np.asarray(value),
                                   reshape=plan.layer_name in RESHAPE_LAYERS)
    rows = []
    for spec in specs:
        kind = "output" if spec.name in outputs else "boundary"
        if spec.name not in present:
            rows.append(Row(spec.name, kind, list(spec.shape),
                            note="not a tensor of the original model: not compared"))
            continue
        rows.append(_row(spec, kind, got[spec.name], want[spec.name],
                         tols.for_tensor(spec.name)))
    rows += [_layer_row(p, worst.get(p.tensor), tols) for p in plans]
    return Comparison(rows, len(feeds), list(dict.fromkeys(events)))


@dataclass
class _Worst:
    """The worst case over samples of one float tensor's errors, folded in one sample at a
    time: max abs error, max abs error / max|ref|, lowest cosine; a shape mismatch instead
    when one is seen."""

    max_abs: float = 0.0
    max_rel: float = 0.0
    cosine: float = 1.0
    finite: bool = True
    mismatch: Optional[Tuple[List[int], List[int]]] = None
    # (max abs error, max |fp32|, cosine) of every sample: the bound max(atol, rtol * peak) is
    # a sample's own, and folding errors and peaks apart would judge mixed pairs.
    samples: List[Tuple[float, float, float]] = field(default_factory=list)

    def add(self, got: np.ndarray, want: np.ndarray, *, reshape: bool = False) -> None:
        if reshape and got.size == want.size:
            got = got.reshape(want.shape)  # already in the model's element order
        if got.shape != want.shape:
            self.mismatch = self.mismatch or (list(got.shape), list(want.shape))
            return
        g64, w64 = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
        with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN values: handled below
            err = float(np.abs(g64 - w64).max(initial=0.0))
            scale = float(np.abs(w64).max(initial=0.0))
            rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
            norms = float(np.linalg.norm(g64) * np.linalg.norm(w64))
            if norms > 0:
                cos = float(np.dot(g64, w64) / norms)
            else:
                cos = 1.0 if err == 0 else 0.0
        if not np.isfinite(err):
            err, rel, cos = float("inf"), float("inf"), float("nan")
        self.max_abs, self.max_rel = max(self.max_abs, err), max(self.max_rel, rel)
        self.samples.append((err, scale, cos))
        self.cosine = min(self.cosine, cos) if np.isfinite(cos) else float("nan")
        self.finite = self.finite and bool(np.isfinite(got).all())

    def within(self, tol: Tolerance) -> bool:
        """Finite, and in every sample the error within max(atol, max_rel * peak) and, unless
        the error is below the absolute floor, the cosine bound (top-1 is the caller's)."""
        return self.finite and all(e <= tol.bound(s) and (e <= tol.atol or c >= tol.min_cosine)
                                   for e, s, c in self.samples)

    def below_floor(self, tol: Tolerance) -> bool:
        return self.max_abs <= tol.atol


def _layer_row(plan: LayerPlan, worst: Optional[_Worst], tols: Tolerances) -> Row:
    if plan.skip or worst is None:
        return Row(plan.tensor or plan.layer, "layer", plan.shape,
                   note=f"{plan.note}: not compared: {plan.skip}")
    if worst.mismatch:
        return Row(plan.tensor, "layer", plan.shape,
                   note=f"{plan.note}: not compared: its layout gives {worst.mismatch[0]}, "
                        f"the model's tensor is {worst.mismatch[1]}")
    tol = tols.for_tensor(plan.tensor)
    row = Row(plan.tensor, "layer", plan.shape, worst.max_abs, worst.max_rel, worst.cosine,
              tolerance=tol.to_dict(), note=plan.note)
    # No top-1: agreement of argmaxes means something for a classifier's output, not here.
    row.passed = worst.within(tol)
    if not worst.finite:
        row.note = f"{plan.note}; {_OVERFLOW_NOTE}"
    return row


def random_feeds(inputs: Sequence[TensorSpec], seed: int, samples: int) -> List[Feed]:
    """Seeded standard-normal floats (0/1 for integer and bool inputs), one dict per sample."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(samples):
        feed = {}
        for spec in inputs:
            dtype = DTYPES[spec.dtype][0]
            if np.issubdtype(dtype, np.floating):
                feed[spec.name] = rng.standard_normal(spec.shape).astype(dtype)
            else:
                feed[spec.name] = rng.integers(0, 2, spec.shape).astype(dtype)
        feeds.append(feed)
    return feeds


# ----------------------------------------------------------------------------- helpers
def _feeds(session: HybridSession, inputs: Any, seed: int, samples: int) -> List[Feed]:
    if inputs is None:
        return random_feeds(session.input_specs, seed, samples)
    if isinstance(inputs, Mapping):
        return [dict(inputs)]
    return [dict(feed) for feed in inputs]


def _compared_tensors(session: HybridSession) -> List[TensorSpec]:
    """Stage outputs in run order, then model outputs no stage produces (passthroughs)."""
    seen, specs = set(), []
    for spec in session.boundary_tensors + session.output_specs:
        if spec.name not in seen:
            seen.add(spec.name)
            specs.append(spec)
    return specs


def _load(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    try:
        return onnx.load(str(model))
    except Exception as exc:  # onnx raises protobuf/OS errors of several kinds
        raise ModelLoadError(f"cannot load the original model: {exc}", model=str(model)) \
            from None


def _check_model_inputs(proto: onnx.ModelProto, session: HybridSession, label: str) -> None:
    """The original model must take the inputs the artifact was converted for (same names, and
    no static dimension that disagrees), or onnxruntime refuses the feeds with its own error."""
    inits = {t.name for t in proto.graph.initializer}
    declared = {i.name: i for i in proto.graph.input if i.name not in inits}
    for spec in session.input_specs:
        value = declared.get(spec.name)
        if value is None:
            raise ShapeError(f"has no input of this name, but the artifact {session.artifact_dir} "
                             "takes one: is it the model the artifact was converted from?",
                             model=label, tensor=spec.name)
        dims = value.type.tensor_type.shape.dim
        static = [d.dim_value if static_dim(d) else None for d in dims]
        if len(static) != len(spec.shape) or any(
                d is not None and d != want for d, want in zip(static, spec.shape)):
            raise ShapeError(f"has shape {static} but the artifact {session.artifact_dir} was "
                             f"converted for {list(spec.shape)}: is it the model the artifact was "
                             "converted from?", model=label, tensor=spec.name)


def _run_reference(reference: Any, names: List[str], feed: Feed, proto: onnx.ModelProto
                   ) -> List[Any]:
    try:
        return reference.run(names, feed)
    except Exception as exc:  # onnxruntime's untyped errors
        text = str(exc).strip().splitlines()
        raise ModelLoadError(f"onnxruntime fails on the original model: "
                             f"{text[0][:400] if text else type(exc).__name__}",
                             model=proto.graph.name or None) from None


def _tensor_names(proto: onnx.ModelProto) -> set:
    graph = proto.graph
    names = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for node in graph.node:
        names.update(o for o in node.output if o)
    return names


def _element_types(proto: onnx.ModelProto) -> Dict[str, str]:
    """The element type of every tensor shape inference can type (int8 inside a QDQ model's
    int8 regions), by the manifest's dtype names."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # the layer rows then assume float32, as for any untyped tensor
        return {}
    names = {np.dtype(v[0]).name: k for k, v in DTYPES.items()}
    types = {}
    for info in list(inferred.graph.value_info) + list(inferred.graph.output):
        elem = info.type.tensor_type.elem_type
        if elem:
            name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name
            if name in names:
                types[info.name] = names[name]
    return types


def _reference_session(proto: onnx.ModelProto, specs: Sequence[TensorSpec],
                       log_severity: int = QUIET) -> Any:
    """fp32 onnxruntime on the original model with every compared tensor as a graph output
    (declared by name and element type only: intermediate shapes need no value_info); a QDQ
    model runs as written (``qdq_as_written``), the semantics the int8 layers simulate."""
    existing = {o.name for o in proto.graph.output}
    for spec in specs:
        if spec.name not in existing:
            elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(DTYPES[spec.dtype][0]))
            proto.graph.output.append(onnx.helper.make_tensor_value_info(spec.name, elem, None))
    try:
        return ort.InferenceSession(proto.SerializeToString(),
                                    qdq_as_written(ort_options(log_severity)),
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelLoadError(f"onnxruntime cannot run the original model: {exc}",
                             model=proto.graph.name or None) from None


def _row(spec: TensorSpec, kind: str, got: List[np.ndarray], want: List[np.ndarray],
         tol: Tolerance) -> Row:
    row = Row(spec.name, kind, list(spec.shape), tolerance=tol.to_dict())
    if any(g.shape != w.shape for g, w in zip(got, want)):
        row.passed, row.note = False, (f"shape mismatch: hybrid {list(got[0].shape)}, fp32 "
                                       f"{list(want[0].shape)}")
        return row
    if not np.issubdtype(want[0].dtype, np.floating):
        row.max_abs = float(max(np.abs(g.astype(np.int64) - w.astype(np.int64)).max(initial=0)
                                for g, w in zip(got, want)))
        row.passed, row.note = row.max_abs == 0, "non-float tensor: must match exactly"
        return row
    worst = _Worst()
    for g, w in zip(got, want):
        worst.add(g, w)
    row.max_abs, row.max_rel, row.cosine = worst.max_abs, worst.max_rel, worst.cosine
    row.top1 = _top1(got, want)
    row.passed = worst.within(tol) and (row.top1 is None or row.top1 >= tol.min_top1
                                        or worst.below_floor(tol))
    if not worst.finite:
        row.note = _OVERFLOW_NOTE
    return row


def _top1(got: List[np.ndarray], want: List[np.ndarray]) -> Optional[float]:
    """Share of rows whose argmax agrees, for classifier-like [N, K>1] tensors."""
    if want[0].ndim != 2 or want[0].shape[1] < 2:
        return None
    agree = sum(int((g.argmax(axis=1) == w.argmax(axis=1)).sum()) for g, w in zip(got, want))
    return agree / sum(w.shape[0] for w in want)


def _fmt(value: Optional[float], spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def _table_cells(row: Row) -> tuple:
    tol = row.tolerance
    tol_text = "-" if tol is None else \
        f"{tol['atol']:g}/{tol['max_rel']:g}/{tol['min_cosine']:g}/{tol['min_top1']:g}"
    if row.kind == "layer":  # diagnostics: "over" tolerance, never a FAIL of the run
        ok = ("ok" if row.passed else "over") if row.tolerance else "skip"
    else:
        ok = ("ok" if row.passed else "FAIL") if row.tolerance or not row.passed else "skip"
    return (row.tensor, row.kind, "x".join(map(str, row.shape)), _fmt(row.max_abs),
            _fmt(row.max_rel), _fmt(row.cosine, ".6f"), _fmt(row.top1, ".4f"), tol_text,
            ok + (f"  {row.note}" if row.note else ""))
