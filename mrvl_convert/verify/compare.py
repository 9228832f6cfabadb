"""Compare a converted artifact (hybrid fp16 run) with the original model on fp32 onnxruntime.

The verdict is that of the model's outputs, as Polygraphy gives it: a model whose outputs are
within tolerance passes. Every tensor that crosses a stage boundary is compared too, as a
diagnostic, so a disagreement is located at the first stage that introduces it. With
``layers=True`` every Mrvl layer inside a stage is compared as well, against the tensor its last
ONNX source node produces in the original model (NHWC turned back to NCHW), so it is located at
the first layer. fp16 range events (inf/NaN inside a stage) are reported; they fail the verdict
only through the outputs they spoil.

The reference runs are ``reference.py``, the figures ``metrics.py``, the report ``report.py``,
the layer-to-tensor maps ``layer_compare.py``.

- requires: the model the artifact was converted from (path or ``ModelProto``) and the artifact
  directory;
- ensures: a ``Comparison`` with one row per boundary tensor and output (and per Mrvl layer with
  ``layers=True``), judged against the tolerances; an output the model does not have fails the
  verdict (never PASS over nothing); an input whose static dims the conversion overrode is run
  at the artifact's shape (``reference.check_model_inputs``); a QDQ model has the artifact's
  fp16 layers rounded as the artifact rounds them (``kept_fp16.py``), and so has the model as
  the converter rewrote it for ``layers=True`` (rounded after those rewrites, which drop Cast
  pairs as no-ops); a tensor a lift computes with unit axes more (``[1, T, F]`` for
  ``[T, F]``) is compared as the model's (the same elements), and a boundary tensor only a lift
  has (the ``[1, T, F]`` input) with the rewritten model's, for ``layers=True``; a model that
  is not the artifact's source raises ``ShapeError``, one onnxruntime cannot run ``ModelLoadError`` (an
  error of verify's own rewrite of it names the rewrite: ``reference.rewrite_label``); a top-1
  flip counts only beyond fp32's near ties and never on random samples (``metrics.Top1``);
  every output row carries its fp16 floor (``fp16_floor.py``: information beside the verdict,
  which says what a FAIL's error is against it).

Collecting and judging stay apart, as in Polygraphy: the figures (``Worst``, ``Top1``, the
floor) are gathered first, then judged against the tolerances, data per output.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx

from mrvl_convert.core.samples import DEFAULT_VERIFY_SAMPLES, GIVEN, RANDOM, SampleOrigin
from mrvl_convert.errors import OptionError
from mrvl_convert.frontend.foreign_kept import WORDS
from mrvl_convert.frontend.recurrent_reference import unrolled_cells
from mrvl_convert.runtime.options import QUIET
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.runtime.simulator import Fp16RangeWarning
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.against import compare_against, rejudge
from mrvl_convert.verify.criteria import CRITERION_NAMES, MARVELL, quantize_of
from mrvl_convert.verify.float_form import mapped_form
from mrvl_convert.verify.norm_scales import scaled_like
from mrvl_convert.verify.floor_minmax import device_nodes
from mrvl_convert.verify.fp16_floor import Floor, fp16_floor
from mrvl_convert.verify.fp16_overflow import merged_events, model_overflow
from mrvl_convert.verify.kept_fp16 import rounded_as_artifact
from mrvl_convert.verify.layer_compare import (RESHAPE_LAYERS, LayerPlan, layer_plans,
                                               layer_values, named_copy, onto)
from mrvl_convert.verify.metrics import Top1, Worst, is_classifier
from mrvl_convert.verify.quant_cost import quantization_cost
from mrvl_convert.verify.reference import (ORIGINAL, check_model_inputs, element_types,
                                           load_model, model_label, reference_session,
                                           rewrite_label, run_reference, sample_feeds,
                                           zero_one_inputs, zero_one_note)
from mrvl_convert.verify.report import Comparison, Row
from mrvl_convert.verify.tolerances import Tolerance, Tolerances
from mrvl_convert.frontend.vocabulary import input_kinds

_OVERFLOW_NOTE = "hybrid value holds inf/NaN (fp16 overflow)"
MISSING_NOTE = "not a tensor of the reference model: not compared"
LIFTED_NOTE = "a tensor of the model as the converter rewrote it (--layers): compared there"


def compare(model: "str | os.PathLike[str] | onnx.ModelProto",
            artifact_dir: "str | os.PathLike[str]",
            inputs: Union[None, Mapping[str, Any], Sequence[Mapping[str, Any]]] = None, *,
            tolerances: Union[None, Tolerances, Mapping[str, Any]] = None, seed: int = 0,
            samples: int = DEFAULT_VERIFY_SAMPLES, gemm: str = "numpy", layers: bool = False,
            log_severity: int = QUIET, engine: str = "graph",
            against: "str | os.PathLike[str] | None" = None, criterion: str = "ours",
            fp32: "str | os.PathLike[str] | onnx.ModelProto | None" = None,
            origin: Optional[SampleOrigin] = None, with_floor: bool = True) -> Comparison:
    """Run the original fp32 model and the hybrid artifact on the same inputs and compare every
    boundary tensor and output. ``inputs``: a feed dict, a list of them, or None for ``samples``
    seeded random feeds of the manifest's shapes. ``gemm`` and ``engine``: how the simulator
    runs (``HybridSession``; the per-layer comparison always runs layer by layer). ``layers``: also compare every Mrvl layer (module docstring).
    ``log_severity``: onnxruntime's log level for the sessions opened here (3: errors only,
    2: warnings too). ``against``: a Marvell ``-output.json`` (device or mlsim) compared with
    the simulator's outputs on the first feed instead (``against.py``; ``model`` is not run).
    ``criterion``: "ours" (the tolerances) or "marvell" (``criteria.py``) for the verdict.
    ``fp32``: for an int8 artifact judged against its QDQ model, the fp32 model that was
    quantized: its outputs on the same feeds give ``Comparison.fp32``, what quantization costs
    (``quant_cost.py``; information, never the verdict). ``origin``: where ``inputs`` came
    from, for the report (default: "given", or "random" without ``inputs``).
    ``with_floor``: also measure each output's fp16 floor (``fp16_floor.py``: the reference
    with every float tensor rounded to fp16, one more onnxruntime run per sample)."""
    if criterion not in CRITERION_NAMES:
        raise OptionError(f"criterion {criterion!r} is not one of {', '.join(CRITERION_NAMES)}")
    tols = tolerances if isinstance(tolerances, Tolerances) else Tolerances.from_dict(tolerances)
    session = HybridSession(artifact_dir, on_range_error="warn", gemm=gemm,
                            log_severity=log_severity, engine=engine)
    proto = load_model(model)
    kinds = input_kinds(proto)  # random samples drawn as the model reads its inputs
    feeds = sample_feeds(session, inputs, seed, samples, kinds)
    if against is not None:
        return compare_against(artifact_dir, feeds[0], against, criterion=criterion,
                               tolerances=tols, gemm=gemm, log_severity=log_severity,
                               engine=engine)
    outputs = {t.name for t in session.output_specs}
    specs = _compared_tensors(session)
    check_model_inputs(proto, session, model_label(model))
    label = model_label(model)
    what = ORIGINAL
    qdq = _is_qdq(proto)  # int8 layers judged against it (converted by us or given as QDQ)
    if qdq:  # a cell's steps are fp16 layers, each rounded
        proto = unrolled_cells(proto, {t.name: t.shape for t in session.input_specs})
    # norms the artifact scaled, scaled alike (exact in float32 barring underflow): a float
    # reference too, or each layer of a scaled norm was compared with the unscaled tensor
    proto = scaled_like(proto, session.manifest)
    unrounded, rounded = proto, []
    if qdq:
        unrounded = named_copy(proto) if layers else proto
        rounded = rounded_as_artifact(proto, session)  # the fp16 layers as it computes them
        if rounded:
            what = rewrite_label(label, f"{len(rounded)} node(s) rounded to fp16 as the "
                                        "artifact's fp16 layers round")
            label += (f" (its {len(rounded)} node(s) the artifact runs as fp16 layers rounded "
                      "to fp16 as it rounds them)")
    present = _tensor_names(proto)
    judged = [s for s in specs if s.name in present]
    form = _rewritten(session, unrounded) if layers else None
    plans = layer_plans(session, form, {s.name for s in specs}) if layers else []
    if form is not None and rounded:
        # rounded after the converter's rewrites, which take fp16 Cast pairs for no-ops; the
        # plans name the layers' tensors as the converter has them (unrounded, named alike)
        rounded_as_artifact(form, session)
    traced = [p for p in plans if not p.skip]
    own = [p.tensor for p in traced if p.tensor in present]
    # boundary tensors a lift added (the [1, T, F] input): the rewrite has them, as the layers
    lifted = [] if form is None else [s.name for s in specs if s.name not in present
                                      and s.name not in outputs and s.name in _tensor_names(form)]
    added = [p.tensor for p in traced if p.tensor not in present] + lifted
    types = element_types(form or proto) if added or own else {}
    reference = reference_session(proto, judged + [
        TensorSpec(t, (), types.get(t, "float32")) for t in own], log_severity, what)
    form_what = rewrite_label(label, "rewritten as the converter rewrote it, for --layers")
    extra = reference_session(form, [TensorSpec(t, (), types.get(t, "float32"))
                                     for t in added], log_severity, form_what) if added else None
    names = [s.name for s in judged]
    got: Dict[str, List[np.ndarray]] = {n: [] for n in names + lifted}
    want: Dict[str, List[np.ndarray]] = {n: [] for n in names + lifted}
    # Layer outputs are folded into running worst cases sample by sample: kept for every
    # sample, a ResNet-50's would take some 40 MB per sample.
    worst = {p.tensor: Worst() for p in traced}
    events: List[List[Any]] = []  # each sample's range events, merged per layer below
    sources: Dict[str, None] = {}  # the range events' ONNX nodes, in order (fp16_overflow.py)
    for feed in feeds:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Fp16RangeWarning)  # recorded below instead
            env, trace = session.run_layers(feed) if traced else \
                (session.run(None, feed, capture=True)[1], [])
        events.append(list(session.last_range_events))
        sources.update(dict.fromkeys(n for e in session.last_range_events
                                     if not e.partial for n in e.source_nodes))
        results = run_reference(reference, names + own, feed, proto, what)
        if extra is not None:
            results += run_reference(extra, added, feed, form, form_what)
        refs = dict(zip(names + own + added, results))
        values = layer_values(traced, trace, {t: np.shape(refs[t]) for t in own + added})
        for name in got:
            want[name].append(np.asarray(refs[name]))
            got[name].append(env[name])
        for plan in traced:
            worst[plan.tensor].add(values[plan.tensor], np.asarray(refs[plan.tensor]),
                                   reshape=plan.layer_name in RESHAPE_LAYERS)
    if origin is None:
        origin = SampleOrigin(((GIVEN if inputs is not None else RANDOM, len(feeds)),))
    decisive = decisive_samples(origin)
    rows = []
    for spec in specs:
        kind = "output" if spec.name in outputs else "boundary"
        if spec.name in lifted:
            rows.append(_row(spec, kind, got[spec.name], want[spec.name],
                             tols.for_tensor(spec.name), decisive))
            rows[-1].note = rows[-1].note or LIFTED_NOTE
            continue
        if spec.name not in present:
            # An output the reference lacks fails the verdict: passed, it would let a model
            # that is not the artifact's source (a re-export with its outputs renamed) PASS
            # with nothing compared. A boundary tensor is a diagnostic: it is only skipped.
            rows.append(Row(spec.name, kind, list(spec.shape), passed=kind != "output",
                            note=MISSING_NOTE))
            continue
        rows.append(_row(spec, kind, got[spec.name], want[spec.name],
                         tols.for_tensor(spec.name), decisive))
    if criterion == MARVELL:
        rejudge(rows, got, want, quantize_of(session.manifest))
    measured = [r.tensor for r in rows if r.kind == "output" and r.max_abs is not None]
    floor = fp16_floor(proto, model_label(model), measured, feeds, want, log_severity,
                       device_nodes(session)) if with_floor else None
    _set_floor(rows, floor)
    rows += [_layer_row(p, worst.get(p.tensor), tols) for p in plans]
    # another quantizer's model rewritten: the second reference is the model as given
    kept = (session.manifest.get("foreign_int8") or {}).get("mode")
    # the model as given: an int8 reference has its fp16 layers rounded, overflowing there too
    overflow = model_overflow(model, list(sources), feeds, log_severity)
    _unjudged_where_rounding_overflows(rows, sorted(set(overflow.nodes) & set(rounded)))
    cost = None if fp32 is None else quantization_cost(
        fp32, session, {n: got[n] for n in names if n in outputs}, feeds, log_severity,
        *(("given", *WORDS[kept][::-1]) if kept in WORDS else ()))
    return Comparison(rows, len(feeds), merged_events(events), fp32=cost,
                      reference=label, origin=origin,
                      floor_note=floor.note if floor is not None else "",
                      overflow=overflow.line(), overflow_nodes=overflow.nodes,
                      feed_note=zero_one_note(zero_one_inputs(
                          session.input_specs, kinds, session.pinned_values)
                          if RANDOM in dict(origin.counts) else []))


def _unjudged_where_rounding_overflows(rows: List[Row], nodes: List[str]) -> None:
    """An int8 reference rounds the artifact's fp16 layers; where the model's own float32 values
    there exceed fp16, it overflows as the artifact does (a LayerNorm's inf variance gives 0 on
    both sides), and agreeing with it proves nothing: no output passes against it."""
    if not nodes:
        return
    why = (f"not judged: the reference rounds {nodes[0]}"
           f"{f' (and {len(nodes) - 1} more node(s))' if len(nodes) > 1 else ''} to fp16 as the "
           "artifact does, and the model's own values there exceed fp16: both overflow alike")
    for row in rows:
        if row.kind == "output":
            row.passed = False
            row.note = f"{row.note}; {why}" if row.note else why


def _set_floor(rows: List[Row], floor: Optional[Floor]) -> None:
    """Each output row's fp16 floor figures, where measured."""
    for row in rows:
        worst = None if floor is None else floor.outputs.get(row.tensor)
        if worst is not None and worst.samples:
            row.floor_max_abs, row.floor_max_rel = worst.max_abs, worst.max_rel
            if row.tolerance is not None:  # judged sample by sample, as the row itself
                row.floor_passes = worst.within(Tolerance(**row.tolerance))


def _rewritten(session: HybridSession, proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model as the converter rewrote it (``float_form.py``): a layer of a node its
    canonicalization added, or of a node whose value a fold changed (``fc_folds.py`` gives that
    value a new name), finds its tensor there; every other tensor keeps its name and is taken
    from the model itself."""
    return mapped_form(named_copy(proto), session)


def _layer_row(plan: LayerPlan, worst: Optional[Worst], tols: Tolerances) -> Row:
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


def _is_qdq(proto: onnx.ModelProto) -> bool:
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in proto.graph.node)


def _compared_tensors(session: HybridSession) -> List[TensorSpec]:
    """Stage outputs in run order, then model outputs no stage produces (passthroughs)."""
    seen, specs = set(), []
    for spec in session.boundary_tensors + session.output_specs:
        if spec.name not in seen:
            seen.add(spec.name)
            specs.append(spec)
    return specs


def _tensor_names(proto: onnx.ModelProto) -> set:
    graph = proto.graph
    names = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for node in graph.node:
        names.update(o for o in node.output if o)
    return names


def _top1(got: List[np.ndarray], want: List[np.ndarray], tol: Tolerance,
          decisive: Sequence[bool]) -> Optional[Top1]:
    """Top-1 of a classifier-like output, each flip judged against that sample's error bound
    (``metrics.Top1``); None for another output."""
    if not is_classifier(want[0]):
        return None
    ties = Top1()
    for k, (g, w) in enumerate(zip(got, want)):
        peak = float(np.abs(w.astype(np.float64)).max(initial=0.0))
        ties.add(g, w, tol.bound(peak), decisive[k] if k < len(decisive) else True)
    return ties


def decisive_samples(origin: SampleOrigin) -> List[bool]:
    """Per sample in order, whether it may decide a FAIL by top-1: every one but random ones."""
    return [key != RANDOM for key, n in origin.counts for _ in range(n)]


def _row(spec: TensorSpec, kind: str, got: List[np.ndarray], want: List[np.ndarray],
         tol: Tolerance, decisive: Sequence[bool] = ()) -> Row:
    row = Row(spec.name, kind, list(spec.shape), tolerance=tol.to_dict())
    # a tensor a lift computes with a unit batch more ([1, T, F] for [T, F]): the same elements
    got = [onto(g, w.shape) for g, w in zip(got, want)]
    # the first sample whose shapes differ, not sample 0 (a decoder Loop's step count can
    # differ in one sample only: "hybrid [1, 10, 8], fp32 [1, 10, 8]" said nothing)
    odd = next((k for k, (g, w) in enumerate(zip(got, want)) if g.shape != w.shape), None)
    if odd is not None:
        row.passed, row.note = False, (f"shape mismatch in sample {odd}: hybrid "
                                       f"{list(got[odd].shape)}, fp32 {list(want[odd].shape)}")
        return row
    if not np.issubdtype(want[0].dtype, np.floating):
        row.max_abs = float(max(np.abs(g.astype(np.int64) - w.astype(np.int64)).max(initial=0)
                                for g, w in zip(got, want)))
        row.passed, row.note = row.max_abs == 0, "non-float tensor: must match exactly"
        return row
    worst = Worst()
    for g, w in zip(got, want):
        worst.add(g, w)
    row.max_abs, row.max_rel, row.cosine = worst.max_abs, worst.max_rel, worst.cosine
    ties = _top1(got, want, tol, decisive)
    row.top1 = None if ties is None else ties.share
    row.near_ties = 0 if ties is None else ties.near_ties
    row.random_flips = 0 if ties is None else ties.counted - ties.decisive_counted
    row.passed = worst.within(tol) and (ties is None or ties.passes(tol.min_top1)
                                        or worst.below_floor(tol))
    if not worst.finite:
        row.note = _OVERFLOW_NOTE
    return row
