"""Stage 5, layout: place each Mrvl stage's tensors in NHWC and insert only the transposes needed.

Requires: one Mrvl ``Stage`` of the plan.
Ensures: a ``MrvlSubgraph`` whose layers read and write physical tensors; 4-D tensors between
spatial layers are NHWC; a layout_transform appears only where a producer's layout differs from
what its consumer needs (never one that undoes another); the model's own NCHW<->NHWC Transposes
cost nothing (they only relabel the data); tensors leaving the stage are in their ONNX layout.

Every tensor carries its logical (ONNX) shape and ``perm``: physical = logical.transpose(perm).
``labels`` name the logical axes so that layouts print as upstream writes them (NCHW, NHWC, NC).

Token tensors (transformer activations) keep their logical order. The newer codegen lays out
every tensor as 4-D NHWC and pads a shorter shape with trailing 1s (princekumar70/tvm@9446d803
src/relay/backend/contrib/mrvl/codegen.cc ``resizeInputOutputLayoutTo4dim``,
``CreateCompositeMrvlFcLayer``, ``CreateMrvlReshapeLayer``), so

- ``[B, T, C]`` is the NHWC tensor ``[B, T, C, 1]``: the same bytes; B is the batch, T and C are
  never read as one (the batch limits of ``rules/`` apply to B);
- ``[B, heads, T, d]`` (a head split) is NHWC with H = heads, W = T and C = d, as it lies: the
  ONNX last axis is NHWC's C, the axis the codegen's Softmax and ReduceMean take (mrvl.py: 4-D
  axis 3), so no layout_transform is needed around attention;
- only layers that are spatial by nature (Conv2D, pools, Resize2D, Concat on channels) ask for
  an image in NHWC; elementwise and one-input layers compute in whatever order their input
  already has inside the stage (``keep_order``), so a token tensor is never turned into NHWC
  and back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.core.graph import static_shape
from mrvl_convert.errors import MrvlConvertError

if TYPE_CHECKING:  # pragma: no cover
    from mrvl_convert.ir.stages import Stage

NHWC = (0, 2, 3, 1)
DEFAULT_LABELS = {1: "C", 2: "NC", 3: "NCW", 4: "NCHW", 5: "NCDHW"}


def default_labels(rank: int) -> str:
    """Axis letters of a tensor nobody has relabelled: NCHW, NC, ... (a, b, c... past 5-D)."""
    return DEFAULT_LABELS.get(rank, "".join(chr(ord("a") + i) for i in range(rank)))


def identity(rank: int) -> Tuple[int, ...]:
    return tuple(range(rank))


def native(rank: int) -> Tuple[int, ...]:
    """The accelerator's own layout for a tensor of this rank: NHWC for 4-D, as is otherwise."""
    return NHWC if rank == 4 else identity(rank)


@dataclass(frozen=True)
class TensorLayout:
    shape: Tuple[int, ...]            # logical (ONNX) shape
    perm: Tuple[int, ...]             # physical = logical.transpose(perm)
    labels: str                       # a letter per logical axis
    # Set on a flatten of a non-logical-order tensor: the physical order of the features, which
    # the consuming FC absorbs by permuting its weight columns.
    scrambled_from: Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]] = None

    @property
    def physical_shape(self) -> List[int]:
        return [self.shape[i] for i in self.perm]

    @property
    def name(self) -> str:
        return "".join(self.labels[i] for i in self.perm)

    def bytes_like(self, perm: Sequence[int]) -> bool:
        """True when the data in ``perm`` order is the same bytes as in ours (size-1 axes move freely)."""
        ours = [a for a in self.perm if self.shape[a] != 1]
        theirs = [a for a in perm if self.shape[a] != 1]
        return ours == theirs


class OutputRef(int):
    """A value index naming output ``slot`` of a multi-output layer (Split).

    It is the layer's index as an int, so code that only counts, orders or stores value indices
    keeps working; the emitter writes ``slot`` as the entry's output index (``[node, slot, 0]``)
    and as ``from_tuple_idx``, as the newer codegen writes a TupleGetItem of a split.
    """
    slot: int

    def __new__(cls, index: int, slot: int) -> "OutputRef":
        ref = super().__new__(cls, index)
        ref.slot = slot
        return ref


def slot_of(ref: int) -> int:
    """The output slot a value index names: 0 unless it is an ``OutputRef``."""
    return ref.slot if isinstance(ref, OutputRef) else 0


@dataclass
class Layer:
    """One Marvell layer, typed: attribute values are ints, tuples, strings and enums as the
    layer kind declares them (``mrvl_convert/layers``); only the emitter writes strings."""
    kind: str                          # layer_name
    rule: Optional[str]                # the rule that made it; None when the layout pass did
    source_nodes: List[str]
    inputs: List[int]                  # indices into MrvlSubgraph.values
    in_layouts: List[TensorLayout]
    out_layout: TensorLayout
    attrs: Dict[str, Any] = field(default_factory=dict)
    consts: List[Tuple[str, np.ndarray]] = field(default_factory=list)  # (role, array)
    extra_outputs: List[TensorLayout] = field(default_factory=list)  # outputs 1.. (Split)
    dtype: str = "float32"             # of the output: "int8" inside an int8 region
    inexact: str = ""                  # int8: why the form may be a step off onnxruntime's run


@dataclass
class MrvlSubgraph:
    name: str
    input_tensors: List[gs.Tensor]
    input_layouts: List[TensorLayout]
    layers: List[Layer]
    heads: List[int]                   # value indices in stage output order
    output_tensors: List[gs.Tensor]
    # Runs of the layers per stage run: the layers take 1/runs of the stage's batch (axis 0)
    # each time (rules/batch_axis.py ``batch_runs``; the manifest's ``runs``).
    runs: int = 1


class LayoutContext:
    """Tracks where each ONNX tensor's data lives while one stage is lowered."""

    def __init__(self, stage: "Stage") -> None:
        self.stage = stage
        self.layers: List[Layer] = []
        self.input_layouts: List[TensorLayout] = []
        self.values: Dict[str, Tuple[int, TensorLayout]] = {}
        self._converted: Dict[Tuple[int, int, Tuple[int, ...]], int] = {}
        self._memo: Dict[Hashable, Any] = {}
        for i, tensor in enumerate(stage.inputs):
            layout = TensorLayout(tuple(shape_of(tensor)), identity(len(shape_of(tensor))),
                                  _input_labels(tensor, stage))
            self.input_layouts.append(layout)
            self.values[tensor.name] = (i, layout)

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per stage and ``key``: a fact of the stage's units (which do not
        change while it is lowered) that every layer would otherwise rescan the stage for."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def layout(self, tensor: gs.Tensor) -> TensorLayout:
        return self.values[tensor.name][1]

    def next_index(self) -> int:
        return len(self.input_layouts) + len(self.layers)

    def emit(self, layer: Layer, output: Optional[gs.Tensor]) -> int:
        index = self.next_index()
        self.layers.append(layer)
        if output is not None:
            self.values[output.name] = (index, layer.out_layout)
        return index

    def emit_multi(self, layer: Layer, outputs: Sequence[gs.Tensor]) -> int:
        """Emit a layer with one output per tensor of ``outputs``: layer.out_layout for the
        first, layer.extra_outputs for the others; consumers refer to them by ``OutputRef``."""
        index = self.next_index()
        self.layers.append(layer)
        layouts = [layer.out_layout] + list(layer.extra_outputs)
        for slot, (tensor, layout) in enumerate(zip(outputs, layouts)):
            self.values[tensor.name] = (OutputRef(index, slot), layout)
        return index

    def dtype_of(self, index: int) -> str:
        """The element type of value ``index``: stage inputs are float32."""
        position = int(index) - len(self.input_layouts)
        return self.layers[position].dtype if position >= 0 else "float32"

    def alias(self, output: gs.Tensor, source: gs.Tensor, layout: TensorLayout) -> None:
        """``output`` is ``source``'s data seen with another logical shape or layout."""
        self.values[output.name] = (self.values[source.name][0], layout)

    def keep_order(self, tensor: gs.Tensor, perm: Sequence[int]) -> Tuple[int, ...]:
        """The physical order an order-agnostic layer (elementwise, one-input) computes
        ``tensor`` in: the order a layer of this stage wrote it in (NHWC for an image, the
        logical order for a token tensor: no layout_transform either way), ``perm`` for a stage
        input (as before: ``native``)."""
        index, layout = self.values[tensor.name]
        if int(index) >= len(self.input_layouts) and layout.scrambled_from is None:
            return layout.perm
        return tuple(perm)

    def require(self, tensor: gs.Tensor, perm: Sequence[int], *, any_shape: bool = False
                ) -> Tuple[int, TensorLayout]:
        """The data of ``tensor`` in ``perm`` order, converting it (once) if it is not already.

        ``any_shape``: the consumer reshapes anyway, so the same bytes in another physical
        shape will do (no reshape layer needed for size-1 axes).
        """
        index, layout = self.values[tensor.name]
        perm = tuple(perm)
        if layout.scrambled_from is not None:
            raise MrvlConvertError("internal error: a scrambled flatten reached a non-FC consumer",
                                   tensor=tensor.name)
        if layout.perm == perm:
            return index, layout
        if layout.bytes_like(perm) and any_shape:
            return index, layout  # same bytes: the consumer reads them as they lie
        target = TensorLayout(layout.shape, perm, layout.labels)
        key = (int(index), slot_of(index), perm)
        if key not in self._converted:
            # Upstream writes a layout_transform even where only size-1 axes move; so do we.
            self._converted[key] = self.emit(Layer(
                kind="layout_transform", rule=None, source_nodes=[], inputs=[index],
                in_layouts=[layout], out_layout=target,
                attrs={"src_layout": layout.name, "dst_layout": target.name},
                dtype=self.dtype_of(index)), None)
        return self._converted[key], target


def shape_of(tensor: gs.Tensor) -> List[int]:
    shape = static_shape(tensor)
    if shape is None:
        raise MrvlConvertError("has no static shape at a Mrvl subgraph boundary",
                               tensor=tensor.name)
    return shape


def _input_labels(tensor: gs.Tensor, stage: "Stage") -> str:
    rank = len(shape_of(tensor))
    inside = {n.name for n in stage.nodes}
    consumers = [c for c in tensor.outputs if c.name in inside]
    # A channels-last input that the model turns to NCHW with a Transpose is NHWC by name too.
    if rank == 4 and consumers and all(
            c.op == "Transpose" and list(c.attrs.get("perm", [])) == [0, 3, 1, 2]
            for c in consumers):
        return "NHWC"
    return default_labels(rank)


def transpose_layout(layout: TensorLayout, perm: Sequence[int],
                     out_shape: Sequence[int]) -> TensorLayout:
    """The layout of Transpose(perm)'s output when it reuses the input's bytes as they are."""
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    new_perm = tuple(inverse[p] for p in layout.perm)
    labels = "".join(layout.labels[p] for p in perm)
    return TensorLayout(tuple(out_shape), new_perm, labels)
