"""Stage 2, canonicalize: one shape for each idiom, so the rules see fewer variants.

Requires: a ``LoadedModel`` (checked, shaped).
Ensures: a graphsurgeon graph, topologically sorted, in which Constant nodes are initializers,
constant subgraphs are folded (by onnxruntime, so the values are the ones the runtime would
compute) within the bounds of ``folding.py`` (a node beyond them stays, listed in ``kept``),
shape arithmetic on the fixed input shapes is folded too (``shape_arithmetic.py``; a Range,
ConstantOfShape, Expand or Tile sized by folded values: ``sized_ops.py``), inputs pinned to a
value (``input_values.py``) are constants, an If whose condition is constant is the branch it
chooses (``branches.py``; its nodes are ``derived`` from it) and one left says why it stays
(``kept``), weight-only int8 weights are float ones (``qdq.py``),
Identity, inference-mode Dropout and a Cast to its input's own type (what a float16
model's Casts become, ``float16_model.py``) are gone, exporters' spellings of one idiom are
one form (``canonical_forms.py``; a ViT's class-token Concat and Gather: ``token_forms.py``;
a packed Q/K/V head split through 5-D tensors: ``packed_qkv.py``; a 1-D signal network's
Conv, BatchNormalization, pooling and what joins them on their 4-D views: ``rank_lift.py``),
a pre-norm LayerNorm's scale and shift and a power-of-two attention scale are folded into the
FC that reads them (``fc_folds.py``), and dead nodes are removed. Every node of the loaded model
that is not in the result is listed in ``removed`` with the reason, or in ``merged`` with the
node that now computes it. Every model output has a static shape (``shapes.py``: else a
ShapeError), and so has every other tensor that onnxruntime can give one; every output onnx can
infer has the loaded model's shape after the rewrites (``output_shapes.py``: else an error).
After a control-flow node onnx cannot infer (``shape_failures.py``) a dim onnx did not infer
stays None, a model output's too: only a run decides it.

Only exact rewrites happen here, so a CPU subgraph cut from this graph computes bit for bit what
the original did; the exceptions, ``Max(x, 0) -> Relu`` and the class-token Concat's form
(``token_forms.py``), differ only in the sign of a zero (onnxruntime's Relu keeps -0, its Max
gives +0; its Conv turns -0 into +0), a 3-D GlobalMaxPool as ReduceMax (a NaN it may skip
propagates; a 4-D global ReduceMax as GlobalMaxPool the same, ``global_max.py``), and the
LayerNorm fold of ``fc_folds.py``, the ReduceSum as MatMul of
``token_ops.py`` and the variance form of ``variance_form.py``, exact in real arithmetic but
rounded differently (their bounds are in those modules), a linear Resize as nearest
upsampling + depthwise Conv + Mul or as interpolation MatMuls (``linear_resize.py``,
``resize_matrices.py``: exact in real arithmetic, their float32 bounds stated there), an
attention mask's constant below fp16's range clamped to -32752 (``mask_constants.py``: exact
within its stated bound), and a Where masking scores before a Softmax made an Add of a finite
mask, a NaN guard after the Softmax dropped (``where_masks.py``: exact within its stated bound).
Rank-5 reshape chains and repeats between rank-4 tensors are their rank-4 forms
(``rank5_detours.py``, exact), a Mul of a one-channel map by per-channel constants a 1x1
Conv (``unit_broadcast.py``, exact but for the sign of a zero product), and a Pad no Conv
absorbs Slice, Conv, Add or MatMul layers (``pad_forms.py``: exact for finite inputs but for
the sign of a zero); a Div by a Sqrt or a Pow by +-0.5 made Reciprocal(Sqrt) and a Mul
(``rsqrt_forms.py``: its bound stated there), a norm statistic's GlobalAveragePool of a 3-D
tensor a ReduceMean over its last axis (``norm_pools.py``: its bound stated there); sliding
windows of frames read by an FC as a
Conv (``window_conv.py``) and a batchless tensor's frames on ``[1, T, ...]``
(``sequence_lift.py``, ``sequence_forms.py``: their sums within the bounds stated there);
TensorFlow's atrous Conv, SpaceToBatch -> Conv -> BatchToSpace in any spelling of the data
movement, as one Conv with dilations (``space_to_batch.py``: its sums within the bound there),
and the per-element ops after it in tf2onnx's ``[C, 1, H, W]`` on ``[1, C, H, W]``
(``unit_swap.py``, exact).
A sequence-first transformer's per-position ops on ``[T, 1, E]`` (torch's ``batch_first=False``)
compute on the view ``[1, T, E]`` (``seq_first.py``, exact).
An Einsum is Transpose, Reshape, ReduceSum, MatMul or Mul layers (``einsum_forms.py``: its
sums reordered, within the bound stated there), a Slice with a negative step a positive-step
Slice and 0/1 selection layers (``slice_forms.py``: exact for finite inputs).
A Softmax over an axis followed only by unit axes is a last-axis Softmax of the view without
them (``softmax_axes.py``, exact).
An LSTM, GRU or RNN over a static sequence is unrolled into one projection MatMul and per-step
FCs and gates (``recurrent_unroll.py``: exact up to the order of each gate's sum, its bound).
A Gather of constant indices is a Slice, a pick of a Concat within one input reads that input
(``pick_forms.py``), and a 2-D or 3-D Concat on a non-leading axis the lifts left, or a 4-D one
on H or W, is the channel Concat of 4-D views (``concat_views.py``; int8 views between Q/DQ
pairs of their grid in a QDQ model): both exact.
An Add where each operand broadcasts along the other's unit axis (additive attention's outer
sum) widens its one-channel operand by a 1x1 Conv of ones (``outer_sums.py``: exact but for a
zero's sign).
A norm in tf's batchnorm formula or as a BatchNormalization with statistics computed from its
input is the decomposed LayerNorm form (``norm_forms.py``), a norm's mean over several axes
one-axis means in turn (``norm_means.py``): exact in real arithmetic, their float32 bounds
stated there.
A norm the caller names (``norm_scales``) reads its input scaled by a power of two, its eps by
its square, so its sum of squares stays inside fp16 (``norm_range.py``: exact barring underflow),
or the whole pre-norm residual stream it reads is scaled (``residual_range.py``, likewise).
Other fusions that change rounding (BatchNormalization into Conv) happen when a rule lowers a
composite onto the accelerator, never on a CPU path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter
from onnx_graphsurgeon.ir.tensor import LazyValues

from mrvl_convert.core.cleanup import cleanup
from mrvl_convert.core.graph import static_shape
from mrvl_convert.core.toposort import toposort
from mrvl_convert.errors import ShapeError
from mrvl_convert.frontend.branches import decided_if, kept_reasons
from mrvl_convert.frontend.canonical_forms import rewrite
from mrvl_convert.frontend.concat_sinking import sink_concats
from mrvl_convert.frontend.concat_views import rewrite_concat_views
from mrvl_convert.frontend.einsum_forms import rewrite_einsums
from mrvl_convert.frontend.fc_folds import fold_into_fcs
from mrvl_convert.frontend.float16_model import same_type_cast
from mrvl_convert.frontend.folding import (FoldBounds, fold_constants, quiet_third_parties,
                                          verbose_requested)
from mrvl_convert.frontend.batchless_lift import lift_batchless
from mrvl_convert.frontend.global_max import rewrite_global_max
from mrvl_convert.frontend.global_means import keep_global_mean_dims
from mrvl_convert.frontend.input_values import pin_inputs
from mrvl_convert.frontend.linear_resize import rewrite_linear_resizes
from mrvl_convert.frontend.load import LoadedModel
from mrvl_convert.frontend.mask_constants import clamp_mask_constants
from mrvl_convert.frontend.merge_targets import settle_merges
from mrvl_convert.frontend.norm_forms import rewrite_norms
from mrvl_convert.frontend.norm_pools import pools_as_norm_means
from mrvl_convert.frontend.norm_range import scale_norms
from mrvl_convert.frontend.outer_sums import widen_outer_sums
from mrvl_convert.frontend.output_shapes import check_output_shapes
from mrvl_convert.frontend.packed_qkv import rewrite_packed_qkv
from mrvl_convert.frontend.pad_forms import rewrite_pads
from mrvl_convert.frontend.pick_forms import rewrite_picks
from mrvl_convert.frontend.rank_lift import lift_ranks
from mrvl_convert.frontend.rank5_detours import rewrite_rank5_detours
from mrvl_convert.frontend.recurrent_unroll import unroll_recurrent
from mrvl_convert.frontend.round_trips import drop_round_trips
from mrvl_convert.frontend.rsqrt_forms import rewrite_rsqrt_forms
from mrvl_convert.frontend.shape_arithmetic import (export_weightless, fold_shape_arithmetic,
                                                    infer_model_shapes)
from mrvl_convert.frontend.sequence_lift import lift_sequences
from mrvl_convert.frontend.seq_first import run_sequence_first
from mrvl_convert.frontend.shapes import resolve_shapes
from mrvl_convert.frontend.shape_failures import after_failures, declared_dims
from mrvl_convert.frontend.slice_forms import rewrite_reversed_slices
from mrvl_convert.frontend.softmax_axes import rewrite_unit_softmaxes
from mrvl_convert.frontend.space_to_batch import rewrite_space_to_batch
from mrvl_convert.frontend.stack_reductions import rewrite_stack_reductions
from mrvl_convert.frontend.stack_pairs import rewrite_quantized_stacks
from mrvl_convert.frontend.token_forms import rewrite_tokens
from mrvl_convert.frontend.unit_broadcast import broadcast_muls_as_convs
from mrvl_convert.frontend.unit_swap import unswap_unit_batches
from mrvl_convert.frontend.where_masks import rewrite_where_masks
from mrvl_convert.frontend.window_conv import rewrite_window_convs
from mrvl_convert.frontend.qdq import dedicate_dequantize, fold_quantized_constants
from mrvl_convert.frontend.qdq_pads import fold_qdq_pads
from mrvl_convert.frontend.int8_means import int8_means_on_4d
from mrvl_convert.frontend.view_pairs import pair_views

_REMOVABLE = {"Identity": "Identity is a no-op", "Dropout": "Dropout is a no-op at inference"}


@dataclass
class CanonicalGraph:
    graph: gs.Graph
    removed: Dict[str, str] = field(default_factory=dict)   # node name -> why it is gone
    op_types: Dict[str, str] = field(default_factory=dict)  # loaded/branch node -> op type
    merged: Dict[str, str] = field(default_factory=dict)    # node name -> node computing it now
    rewritten: Dict[str, str] = field(default_factory=dict)  # node name -> what it became
    kept: Dict[str, str] = field(default_factory=dict)      # node name -> why not rewritten
    derived: Dict[str, str] = field(default_factory=dict)   # added node -> loaded node it is from
    copies: Dict[str, str] = field(default_factory=dict)    # DequantizeLinear copy -> its original


def canonicalize(loaded: LoadedModel, *, verbose: Optional[bool] = None,
                 norm_scales: Optional[Mapping[str, int]] = None) -> CanonicalGraph:
    """``verbose``: let graphsurgeon and onnxruntime print their warnings (default:
    ``MRVL_CONVERT_VERBOSE`` set, as ``mrvl-convert -v`` does); ``norm_scales``: the norms
    whose input ``norm_range.py`` scales by ``2**-k`` (ReduceMean of the squares -> k)."""
    verbose = verbose_requested() if verbose is None else verbose
    with quiet_third_parties(verbose):
        return _canonicalize(loaded, verbose, norm_scales or {})


def _canonicalize(loaded: LoadedModel, verbose: bool,
                  norm_scales: Mapping[str, int]) -> CanonicalGraph:
    graph = gs.import_onnx(loaded.proto)
    op_types = {n.name: n.op for n in graph.nodes}
    pin_inputs(graph, loaded.values)
    removed: Dict[str, str] = {}
    constant_nodes = {n.name for n in graph.nodes if n.op == "Constant"}
    branch_of: Dict[str, str] = {}  # node of a decided If's branch -> the If
    unfolded = fold_constants(graph, verbose, origins=branch_of)
    fold_shape_arithmetic(graph, loaded.proto, lambda g: unfolded.update(
        fold_constants(g, verbose, origins=branch_of)))
    # What the model gives as constants (its weights), not what folding computed here.
    given = {t.name for t in loaded.proto.graph.initializer} | {
        out for node in loaded.proto.graph.node if node.op_type == "Constant"
        for out in node.output}
    while fold_quantized_constants(graph, _opset(loaded), FoldBounds.of(graph).tensor_bytes,
                                   given):
        unfolded.update(fold_constants(graph, verbose, origins=branch_of))
    after_fold = {n.name for n in graph.nodes}
    # A decided If's branch nodes as loaded, before any rewrite (what convert's light set reads).
    op_types.update({n.name: n.op for n in graph.nodes if n.name in branch_of})
    # A node refused in one pass (its size input not yet computed) may fold in a later one.
    unfolded = {name: why for name, why in unfolded.items() if name in after_fold}
    for name in op_types:
        if name not in after_fold:
            removed[name] = ("Constant node turned into an initializer" if name in constant_nodes
                             else decided_if(name, loaded.values) if name in branch_of.values()
                             else "computed at conversion time (constant folding)")
    for node in list(graph.nodes):
        reason = _REMOVABLE.get(node.op) or same_type_cast(node)
        if reason and _bypass(graph, node):
            removed[node.name] = f"removed by canonicalize: {reason}"
    forms = rewrite(graph, _opset(loaded))
    forms.rewritten.update(clamp_mask_constants(graph))  # exact within its stated bound
    rewrite_where_masks(graph, forms)  # exact within its stated bound
    rewrite_rsqrt_forms(graph, forms)  # norms' x / sqrt(v) and powers: exact or its bound
    scale_norms(graph, norm_scales, forms)  # x * 2**-k into a norm's squares: exact (bound)
    copies = dedicate_dequantize(graph)
    pair_views(graph, forms)  # exact: a view quantized only after it reads its pair's copy
    before_cleanup = {n.name for n in graph.nodes}
    toposort(cleanup(graph))
    if _has_unknown_shapes(graph):
        graph = _reinfer_shapes(graph, loaded.proto)
        _check_output_shapes(graph, loaded, unfolded, verbose)
    round_trips = drop_round_trips(graph)  # exact: Transpose chains that move nothing
    if round_trips:
        removed.update(round_trips)
        toposort(cleanup(graph))
    pools_as_norm_means(graph, _opset(loaded), forms)  # a 3-D norm GAP as ReduceMean (bound)
    if rewrite_norms(graph, _opset(loaded), forms):  # a norm's tf/BN spelling: LayerNorm form
        toposort(cleanup(graph))
    if unroll_recurrent(graph, forms, _opset(loaded)):  # LSTM/GRU/RNN over static T: FC, gates (its bound)
        toposort(cleanup(graph))
    # After the shapes that depended on folded values are known: the token rewrites and the
    # folds check the activations' shapes (and the folds read constant head splits).
    if rewrite_einsums(graph, _opset(loaded), forms):  # Einsum as MatMul: its bound stated there
        toposort(cleanup(graph))
    if rewrite_space_to_batch(graph, forms):  # SpaceToBatch -> Conv -> BatchToSpace: dilated
        unswap_unit_batches(graph, forms)  # what followed it in [C, 1, H, W] on [1, C, H, W]
        toposort(cleanup(graph))
    if rewrite_window_convs(graph, _opset(loaded), forms):  # windows of frames + FC: a Conv
        toposort(cleanup(graph))
    if rewrite_stack_reductions(graph, forms):  # a stack's Max/Sum/Mean: elementwise (its bound)
        toposort(cleanup(graph))
    if rewrite_quantized_stacks(graph, forms):  # a QDQ stack's ReduceMax: a Max (exact)
        toposort(cleanup(graph))
    if lift_ranks(graph, _opset(loaded), forms, ranks=(3,)):  # 1-D signals on 4-D views
        toposort(cleanup(graph))
    if lift_batchless(graph, forms, _opset(loaded)):  # [H, W, C] between Squeeze(0)/Unsqueeze(0) as [1, H, W, C]
        toposort(cleanup(graph))
    if lift_sequences(graph, _opset(loaded), forms):  # frames [T, ...] as [1, T, ...]
        toposort(cleanup(graph))
    if run_sequence_first(graph, forms):  # exact: torch's [T, 1, E] per position as [1, T, E]
        toposort(cleanup(graph))
    tokens = rewrite_tokens(graph, _opset(loaded), forms)
    heads = rewrite_packed_qkv(graph, _opset(loaded), forms)
    sunk = sink_concats(graph, _opset(loaded), forms)
    # exact: a Gather as a Slice, a pick of a Concat its input's (after the token Gathers, and
    # after sinking: an int8 model's Concat sunk past its QDQ pair is read by the picks directly)
    sunk = rewrite_picks(graph, _opset(loaded), forms) or sunk
    resized = rewrite_linear_resizes(graph, _opset(loaded), forms)
    means = keep_global_mean_dims(graph, forms)  # exact: a mean keeping H and W, a Flatten
    detours = rewrite_rank5_detours(graph, _opset(loaded), forms)  # exact: rank 5 as rank 4
    detours = broadcast_muls_as_convs(graph, forms) or detours  # exact: a 1x1 Conv
    detours = widen_outer_sums(graph, forms) or detours  # exact: an outer sum's 1x1 Conv
    means = rewrite_global_max(graph, forms) or means  # exact without NaN: a GlobalMaxPool
    folded = fold_into_fcs(graph, forms)
    # After the folds (a LayerNorm of [N, C] folds into its FC first), and what sinking joined.
    if (lift_ranks(graph, _opset(loaded), forms) or folded or tokens or heads or sunk or resized
            or means or detours):
        toposort(cleanup(graph))
    if rewrite_concat_views(graph, forms):  # exact: 2-D/3-D, 4-D H/W Concats on 4-D views
        toposort(cleanup(graph))
    if int8_means_on_4d(graph, _opset(loaded), forms):  # exact: an int8 mean the lift left
        toposort(cleanup(graph))
    if fold_qdq_pads(graph, forms):  # exact: an int8 region's zero Pad into its Conv's pads
        toposort(cleanup(graph))
    if rewrite_pads(graph, _opset(loaded), forms):  # a Pad no Conv absorbs, after the lifts
        toposort(cleanup(graph))
    if rewrite_reversed_slices(graph, _opset(loaded), forms):  # exact: a selection MatMul
        toposort(cleanup(graph))
    if rewrite_unit_softmaxes(graph, _opset(loaded), forms):  # exact: a last-axis Softmax view
        toposort(cleanup(graph))
    check_output_shapes(graph, loaded.proto, loaded.label)  # no rewrite changed an output
    forms.merged, lost = settle_merges(forms.merged, forms.derived, {n.name for n in graph.nodes})
    removed.update(lost)  # merged into a node a later rewrite removed unread
    for name in before_cleanup - {n.name for n in graph.nodes} - set(forms.merged):
        removed.setdefault(name, "removed by canonicalize: its outputs are never used")
    left = {n.name for n in graph.nodes}
    branches = {n: origin for n, origin in branch_of.items() if n in left}
    return CanonicalGraph(graph=graph, removed=removed, op_types=op_types, merged=forms.merged,
                          rewritten=forms.rewritten,
                          kept={**unfolded, **kept_reasons(graph), **forms.kept},
                          derived={**branches, **forms.derived, **copies}, copies=copies)


def _opset(loaded: LoadedModel) -> int:
    return next(o.version for o in loaded.proto.opset_import if o.domain in ("", "ai.onnx"))


def _check_output_shapes(graph: gs.Graph, loaded: LoadedModel, unfolded: Dict[str, str],
                         verbose: bool) -> None:
    """Shapes inference left unknown, computed by onnxruntime; a model output still unknown is
    an error here (any other tensor only if it becomes a stage boundary: emit says so)."""
    # after a Loop onnx cannot infer, a dim only the run decides; a model output may keep it
    after = after_failures(graph, loaded.shape_failures)
    unresolved = resolve_shapes(graph, loaded.proto.ir_version, blocked=unfolded,
                                verbose=verbose, unsure=after)
    dynamic = {t.name for t in graph.outputs} & after
    declared_dims(graph, loaded.proto, dynamic)
    for tensor in graph.outputs:
        if tensor.name in unresolved and tensor.name not in dynamic:
            raise ShapeError(f"is a model output without a static shape: "
                             f"{unresolved[tensor.name]}; the artifact's outputs must have one",
                             model=loaded.label, tensor=tensor.name)


def _has_unknown_shapes(graph: gs.Graph) -> bool:
    tensors = [t for n in graph.nodes for t in n.outputs] + list(graph.outputs)
    return any(static_shape(t) is None for t in tensors if t.name)


def _reinfer_shapes(graph: gs.Graph, original: onnx.ModelProto) -> gs.Graph:
    """Shapes that depended on folded values (Shape -> Gather -> Reshape) are static now.
    Inference reads no float weight's values: they are exported without them and the
    re-imported graph takes the very arrays ``graph`` held (issue 45: exporting copied every
    weight's bytes once more, to be imported again)."""
    proto = export_weightless(graph, value_info=False)
    proto.ir_version = original.ir_version
    del proto.graph.value_info[:]
    for output in proto.graph.output:
        dims = output.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            output.type.tensor_type.ClearField("shape")
    try:
        proto = infer_model_shapes(proto)
    except Exception:  # the shapes we had stay: rules report the tensors still unknown
        return graph
    inferred = gs.import_onnx(proto)
    _take_weights(inferred, graph)
    return toposort(inferred.cleanup(remove_unused_graph_inputs=False))


def _take_weights(inferred: gs.Graph, graph: gs.Graph) -> None:
    """Each constant of ``inferred`` exported without its values gets the onnx tensor
    ``gs.export_onnx`` writes for ``graph``'s constant, as importing it would hold it (lazily:
    the same shape, type and bytes as exporting and importing the whole graph gave)."""
    given = {name: t for name, t in graph.tensors().items() if isinstance(t, gs.Constant)}
    for name, tensor in inferred.tensors().items():
        if isinstance(tensor, gs.Constant) and name in given and _bare(tensor):
            source = given[name]
            proto = getattr(source._values, "tensor", None)  # lazily loaded or sparse
            tensor._values = (type(source._values)(proto) if proto is not None else
                              LazyValues(OnnxExporter.export_tensor_proto(source)))


def _bare(tensor: gs.Constant) -> bool:
    """A constant imported from a proto that holds no values (``export_weightless``)."""
    proto = getattr(tensor._values, "tensor", None)
    return isinstance(proto, onnx.TensorProto) and not any(
        proto.HasField(name) if name == "raw_data" else len(getattr(proto, name))
        for name in ("raw_data", "float_data", "double_data", "int32_data", "int64_data",
                     "uint64_data", "string_data", "external_data"))


def _bypass(graph: gs.Graph, node: gs.Node) -> bool:
    """Drop a pass-through node; False when it must stay (e.g. it links two graph names)."""
    if node.op == "Dropout":
        if len(node.outputs) > 1 and node.outputs[1].outputs:
            return False  # the mask is used
        if len(node.inputs) > 2 and not isinstance(node.inputs[2], gs.Constant):
            return False  # training_mode decided at run time
        if len(node.inputs) > 2 and bool(node.inputs[2].values):
            return False
    src, dst = node.inputs[0], node.outputs[0]
    if dst in graph.outputs:
        if src in graph.inputs or src in graph.outputs or isinstance(src, gs.Constant):
            return False
        if len(src.outputs) != 1:
            return False
        # The producer writes the graph output directly, keeping the output's name.
        producer = src.inputs[0]
        index = producer.outputs.index(src)
        node.outputs.clear()
        node.inputs.clear()
        producer.outputs[index] = dst
        return True
    for consumer in list(dst.outputs):
        for i, tensor in enumerate(consumer.inputs):
            if tensor is dst:
                consumer.inputs[i] = src
    node.outputs.clear()
    node.inputs.clear()
    return True
