"""The model's batch and the device's: whether a model input's axis 0 is a batch, decided from
the graph (the device batch rule's ``model_batch`` asks it), and how a region whose batch is
larger than a layer or the device takes runs anyway (``batch_runs``: the one home of that rule).

The rule: the model's batch is what the model treats as one sample. An input whose axis 0 every
reader first moves out of place, by an ``Unsqueeze`` adding axis 0 (``[T, F] -> [1, T, F]``)
or a ``Reshape`` to a higher rank with a leading 1, is one sample whose axis 0 is a data axis
(madmom's music nets read ``[frames, bins]`` this way): its batch is 1. Ops that keep axis 0
where it is on the way there (elementwise ops of equal output rank, ``Pad``, ``Slice``,
``Cast``, an ``Unsqueeze`` or ``Squeeze`` not at axis 0) are followed. A recurrent cell
(``LSTM``, ``GRU``, ``RNN``) in its default layout reads axis 0 of its sequence as time and of
its states ``[directions, batch, hidden]`` as directions (ONNX's operator spec; silero_vad's
``[2, 1, 64]`` states sliced per layer): not a batch. Any other reader (``Conv``, ``MatMul``,
``Transpose``, a graph output, ...) takes axis 0 as it is: then it is a batch (above the
device's, it runs in chunks where the region allows: ``batch_runs``).

Where a Mrvl subgraph's boundary would carry an axis 0 that is no batch, the codegen would
compile it as one (it takes axis 0 of a subgraph's input or output as its batch): the lift of a
batchless input (``batchless_lifts``) and the layout ops around a recurrent cell's time-major
sequence (``sequence_lifts``) run on CPU instead, so the subgraphs read and write batch-1
tensors. Only placement changes: the graph and its values are the model's (exact).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Set

import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import activation_inputs, is_const, squeeze_axes, static_shape
from mrvl_convert.ir.stages import Stage
from mrvl_convert.rules.per_sample import is_weight, reads_across_batch

# Ops through which axis 0 stays axis 0 (when the output's rank is the input's).
_KEEPS_AXIS0 = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Elu", "Relu", "LeakyRelu", "Tanh",
    "Sigmoid", "Exp", "Log", "Sqrt", "Abs", "Neg", "Clip", "Cast", "Identity", "Pad", "Slice",
    "Softplus", "Selu", "HardSigmoid", "Erf", "Reciprocal", "Dropout",
    "QuantizeLinear", "DequantizeLinear",  # an int8 model's per-tensor pair: elementwise
})


# Recurrent cells: axis 0 of what they read is time or directions (layout 0), not a batch.
_RECURRENT = frozenset({"LSTM", "GRU", "RNN"})


def _normalized(axes: list, rank: int) -> Set[int]:
    return {a % rank for a in axes} if rank else set(axes)


def _lifts(node: gs.Node, src: list) -> Optional[bool]:
    """True when the node puts a new axis in front of axis 0; False when axis 0 stays axis 0
    (follow its output); None when the node reads axis 0 as a batch."""
    dst = static_shape(node.outputs[0]) if node.outputs else None
    if node.op in _RECURRENT:
        return True if not node.attrs.get("layout", 0) else None
    if node.op in ("Unsqueeze", "Squeeze"):
        axes = squeeze_axes(node)
        if axes is None or dst is None:
            return None
        rank = len(dst) if node.op == "Unsqueeze" else len(src)
        return 0 in _normalized(axes, rank) if node.op == "Unsqueeze" else (
            None if 0 in _normalized(axes, rank) else False)
    if node.op == "Reshape":
        return True if dst and len(dst) > len(src) and dst[0] == 1 != src[0] else None
    if node.op in _KEEPS_AXIS0 and dst is not None and len(dst) == len(src):
        return False
    return None


def axis0_is_batch(graph: gs.Graph, tensor: gs.Tensor) -> bool:
    """False when every path from ``tensor`` moves its axis 0 behind a new leading axis before
    anything reads it (see the module docstring); True otherwise."""
    return lift_path(graph, tensor) is None


def lift_path(graph: gs.Graph, tensor: gs.Tensor) -> Optional[List[gs.Node]]:
    """The nodes from ``tensor`` up to and including the ones that lift its axis 0 behind a
    new leading axis (the ops followed on the way, then the ``Unsqueeze`` or ``Reshape``; a
    recurrent cell, which reads axis 0 as time, is not listed); None when axis 0 is a batch."""
    outputs = {t.name for t in graph.outputs}
    frontier, seen, path = [tensor], set(), {}
    while frontier:
        current = frontier.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        src = static_shape(current)
        if current.name in outputs or not current.outputs or not src:
            return None
        for node in current.outputs:
            lifted = _lifts(node, src)
            if lifted is None:
                return None
            if node.op not in _RECURRENT:
                path[node.name] = node
            if not lifted:
                frontier.extend(t for t in node.outputs[:1] if not is_const(t))
    return list(path.values())


def batchless_lifts(graph: gs.Graph, limit: int) -> Dict[str, str]:
    """Node name -> why it runs on CPU, for the lifts of the model inputs whose axis 0 is no
    batch (``lift_path``) and larger than the device's ``limit``. TVM's Marvell codegen lays a
    Mrvl subgraph's input out by its rank (2-D as NC, 3-D as NCW, 4-D as NCHW) and takes axis 0
    as the batch it compiles (the Nodes-JSON's ``batch_size``): a subgraph reading madmom's
    ``[frames, bins]`` would be compiled at batch ``frames``, the frames of one sample. With
    the lift (a view: the same bytes) on the CPU side, the subgraph reads the lifted
    ``[1, frames, ...]``, batch 1, and computes what the model does."""
    found: Dict[str, str] = {}
    for tensor in graph.inputs:
        shape = static_shape(tensor)
        if is_const(tensor) or not shape or len(shape) < 2 or shape[0] <= limit:
            continue
        for node in lift_path(graph, tensor) or ():
            found[node.name] = (
                f"on the way from the batchless input {tensor.name!r} {list(shape)} (axis 0 "
                f"is data, not a batch) to its lifted [1, ...] form: it runs on CPU so that "
                f" the Mrvl subgraph reads the lifted tensor at batch 1, not axis 0's "
                f"{shape[0]} as its batch (the codegen takes a 2-D input as NC, N the batch)")
    return found


# The device's batch, and a batch above it run in chunks.
#
# Marvell's compiler takes batch <= 8 (``-batch``; a layer may take less: Mul2D and Sub take 1).
# DPDK's ML API runs a model compiled at batch b on several batches in one request: ``struct
# rte_ml_op``'s ``nb_batches`` ("Number of batches. Minimum value must be one. Input buffer must
# hold inference data for each batch as contiguous", DPDK/dpdk ``lib/mldev/rte_mldev.h``, which
# also gives ``rte_ml_model_info`` ``min_batches``/``max_batches`` and an I/O shape "for
# min_batches of the model"); the cnxk driver takes the model's compiled batch from its metadata
# (``cn10k_ml_model_load``: ``model->batch_size = metadata.model.batch_size``, 0 meaning 256, passed
# to the firmware in the model-start job descriptor, ``drivers/ml/cnxk/cn10k_ml_ops.c``). So a
# region of N samples whose every op computes each sample on its own (``per_sample.py``) is
# compiled at batch b and run N/b times on contiguous chunks of axis 0, by the application or as
# ``nb_batches``: the manifest's ``runs``. Per-sample ops make that numerically the run of the
# whole batch: each output sample reads its own input sample only.


@dataclass(frozen=True)
class BatchRuns:
    """A Mrvl region of ``batch`` samples compiled at ``device_batch`` and run ``runs`` times."""
    batch: int
    device_batch: int

    @property
    def runs(self) -> int:
        return self.batch // self.device_batch


def device_batch(batch: int, limit: int) -> int:
    """The batch a region of ``batch`` samples is compiled at: the largest divisor of ``batch``
    that is at most ``limit``, so that every run is full (no padded last run, no second
    program for a remainder): 10 -> 5 (2 runs), 12 -> 6, 16 -> 8, a prime 11 -> 1 (11 runs)."""
    return max(d for d in range(1, min(batch, limit) + 1) if batch % d == 0)


def chunk_refusal(node: gs.Node, batch: int, model_batch: int) -> Optional[str]:
    """None when ``node``, whose axis 0 is ``batch`` (above a limit), may run in chunks of the
    batch: its axis 0 is the model's batch and it computes each sample on its own
    (``per_sample.reads_across_batch``). Else why not, naming the op: the batch limit's reason
    keeps it."""
    if batch != model_batch:
        return f"axis 0 of this {node.op} ({batch}) is not the model's batch ({model_batch})"
    return reads_across_batch(node, batch)


def stage_batch_limit(stage: Stage) -> Optional[int]:
    """The largest batch every layer of ``stage`` takes: the smallest ``max`` of the
    ``batch_at_most`` constraints of its composites' rules (the device's, and a layer's own:
    Mul2D's 1), counting only the roles present; None when no rule states one."""
    limits = [int(c.args["max"]) for unit in stage.units if unit.composite is not None
              for c in unit.composite.rule.constraints
              if c.check == "batch_at_most" and unit.composite.binding.node(c.role) is not None]
    return min(limits, default=None)


def batch_runs(stage: Stage, model_batch: int,
               device_limit: Optional[int] = None) -> Optional[BatchRuns]:
    """How ``stage`` runs when its batch is above what one of its layers or the device takes
    (``device_limit``: the hardware profile's ``max_batch``, 1 for a TVM-built model, below
    the compiler's 8): every tensor it reads or writes has the same axis 0 N, the model's batch
    (``model_batch``), or another axis where the model's batch fits (time steps or heads of a
    batch-1 model), every node computes each row of axis 0 on its own, and it is compiled at
    ``device_batch(N, limit)``, ``limit`` the smaller of the two. None when the stage runs as it is (its batch fits, or it is not per-sample:
    then the device check still names the batch)."""
    limit = min((x for x in (stage_batch_limit(stage), device_limit) if x is not None),
                default=None)
    if limit is None or _fits_at_its_boundary(stage, limit):
        return None
    # The data: not an int8 weight's DequantizeLinear, one value for every sample.
    nodes = [n for n in stage.nodes if not all(is_weight(t) for t in n.outputs)]
    tensors = list(stage.inputs) + list(stage.outputs) + [
        t for node in nodes for t in activation_inputs(node) + list(node.outputs)
        if not is_weight(t)]
    batches = {tuple(static_shape(t) or ())[:1] for t in tensors}
    if limit is None or len(batches) != 1:
        return None
    (batch,) = batches.pop() or (0,)
    # Axis 0 other than a batch above the limit (a recurrent cell's time steps of a batch-1
    # model) is chunked as well: each run computes its rows on their own all the same.
    other = model_batch <= limit
    if batch <= limit or batch != model_batch and not other or any(
            reads_across_batch(n, batch) for n in nodes):
        return None
    return BatchRuns(batch, device_batch(batch, limit))


def _fits_at_its_boundary(stage: Stage, limit: int) -> bool:
    """True when the stage's inputs and outputs already decide ``batch_runs``'s None: their
    axes 0 differ, or are one batch within ``limit`` (the tensors inside can only add another
    axis 0, which is None too). Spares the scan of every tensor of an unrolled stage."""
    batches = {tuple(static_shape(t) or ())[:1] for t in list(stage.inputs) + list(stage.outputs)}
    if len(batches) != 1:
        return len(batches) > 1
    (batch,) = batches.pop() or (0,)
    return batch <= limit


# Ops that only move or view elements: on CPU next to a recurrent cell they cost a copy at most.
_LAYOUT = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
_CELLS = _RECURRENT | {"DynamicQuantizeLSTM"}


def _layout_back(tensor: gs.Tensor, limit: int) -> Optional[List[gs.Node]]:
    """The layout ops that make ``tensor`` (axis 0 above ``limit``) from a tensor whose axis 0
    is at most ``limit``, nearest first; None when something else makes it."""
    chain: List[gs.Node] = []
    while True:
        shape = static_shape(tensor)
        if shape is None:
            return None
        if shape and shape[0] <= limit:
            return chain
        if not tensor.inputs or tensor.inputs[0].op not in _LAYOUT:
            return None
        node = tensor.inputs[0]
        chain.append(node)
        tensor = node.inputs[0]


def _layout_forward(tensor: gs.Tensor, limit: int, found: List[gs.Node]) -> bool:
    """Adds to ``found`` the layout ops that bring every reader's path from ``tensor`` to an
    axis 0 at most ``limit``; False when another op reads a tensor whose axis 0 is above it."""
    for reader in tensor.outputs:
        if reader.op in _CELLS:
            continue
        out = reader.outputs[0] if reader.outputs else None
        shape = static_shape(out) if out is not None else None
        if reader.op not in _LAYOUT or shape is None:
            return False
        found.append(reader)
        if shape and shape[0] > limit and not _layout_forward(out, limit, found):
            return False
    return True


def sequence_lifts(graph: gs.Graph, limit: int, model_batch: int) -> Dict[str, str]:
    """Node name -> why it runs on CPU: in a model whose batch is at most ``limit``, the layout
    ops that turn a batch-1 tensor into a recurrent cell's time-major ``[T, 1, C]`` input, and
    those that turn the cell's ``[T, directions, 1, H]`` outputs back into batch-1 tensors,
    and those that only lay a batch-1 tensor out as a model output whose axis 0 is above it.
    On CPU beside the cell (which runs there), the Mrvl subgraphs around it read and write the
    batch-1 tensors; on Mrvl they would be compiled at batch ``T`` (the codegen takes axis 0
    of a subgraph's input or output as its batch). Where another op reads or makes the
    time-major tensor, nothing moves (``batch_runs`` may chunk that region)."""
    if model_batch > limit:
        return {}
    found: Dict[str, str] = {}
    for cell in (n for n in graph.nodes if n.op in _CELLS):
        moved = list(_layout_back(cell.inputs[0], limit) or ()) if cell.inputs else []
        for out in cell.outputs:
            after: List[gs.Node] = []
            if _layout_forward(out, limit, after):
                moved += after
        for node in moved:
            found[node.name] = (
                f"makes or reads the time-major sequence of {cell.op} {cell.name!r} (axis 0: "
                f"its time steps, not a batch): it runs on CPU beside the cell, so that the Mrvl "
                f"subgraphs around it read and write batch-1 tensors")
    # An unrolled cell's (recurrent_unroll) or any other time-major output laid out from a
    # batch-1 tensor: the model's own outputs are whole tensors, a subgraph's are not.
    for out in graph.outputs:
        if len(static_shape(out) or ()) < 2:  # rank 0/1 has no batch axis for the codegen
            continue
        for node in _layout_back(out, limit) or ():
            found.setdefault(node.name, (
                f"lays out the model's output {out.name!r} (axis 0 of {static_shape(out)[0]}: "
                f"not a batch) from a batch-1 tensor: it runs on CPU, so that the Mrvl subgraph "
                f"writes the batch-1 tensor"))
    return found
