"""The per-step arithmetic of an unrolled recurrent cell (``recurrent_unroll.py``'s helpers).

Every tensor of a step is 2-D ``[N, C]`` (the model's batch N, features C): the state ``H`` and
``C`` are ``[N, hidden]``, a step's input projection a slice along axis 1 of the whole
sequence's projection ``[N, T * D * G * hidden]``. No step slices an axis that may be the
batch, so the steps map as FC, StridedSlice, Sigmoid, Tanh, Mul2D and Sum2D layers.

The formulas are ONNX's (operators LSTM, GRU, RNN, default activations), term for term; what
differs from onnxruntime is only the order of the sums (the bias ``Rb`` added to ``X W^T + Wb``
before ``H R^T``), see ``recurrent_unroll.py`` for the bound. A zero initial state skips the
products by it (``H R^T = 0``, ``f * C = 0``): exact.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx_graphsurgeon as gs

from mrvl_convert.frontend.canonical_forms import Names, axes_node


@dataclass
class Builder:
    """Makes nodes with shaped float32 outputs, in order (``added``); the caller puts them in
    the graph."""
    graph: gs.Graph
    names: Names
    origin: str
    opset: int
    added: List[gs.Node] = field(default_factory=list)

    def op(self, op: str, inputs: Sequence[gs.Tensor], shape: Sequence[int], tag: str,
           attrs: Optional[dict] = None, dtype=np.float32) -> gs.Variable:
        out = gs.Variable(self.names.fresh(f"{self.origin}_{tag}"), dtype=dtype,
                          shape=list(shape))
        node = gs.Node(op, self.names.fresh(f"{self.origin}_{tag}"), attrs=attrs or {},
                       inputs=list(inputs), outputs=[out])
        self.added.append(node)
        return out

    def const(self, values: np.ndarray, tag: str) -> gs.Constant:
        return gs.Constant(self.names.fresh(f"{self.origin}_{tag}"), np.ascontiguousarray(values))

    def ints(self, values: Sequence[int], tag: str) -> gs.Constant:
        return self.const(np.asarray(values, dtype=np.int64), tag)

    def columns(self, x: gs.Tensor, start: int, width: int, rows: int, tag: str) -> gs.Variable:
        """``x[:, start:start + width]`` of a 2-D ``[rows, C]`` tensor."""
        return self.op("Slice", [x, self.ints([start], f"{tag}_s"),
                                 self.ints([start + width], f"{tag}_e"), self.ints([1], f"{tag}_a")],
                       [rows, width], tag)

    def to_front(self, x: gs.Tensor, shape: Sequence[int], tag: str) -> gs.Variable:
        """``[A, 1, C]`` as ``[1, A, C]`` by Squeeze(1) and Unsqueeze(0): rules/batch_axis.py
        then knows axis 0 is no batch (a Reshape or Transpose reads it as one)."""
        squeezed = self._axes("Squeeze", x, 1, [shape[1], shape[2]], f"{tag}_squeezed")
        return self._axes("Unsqueeze", squeezed, 0, shape, tag)

    def _axes(self, op: str, x: gs.Tensor, axis: int, shape: Sequence[int], tag: str):
        name = self.names.fresh(f"{self.origin}_{tag}")
        out = gs.Variable(name, dtype=np.float32, shape=list(shape))
        self.added.append(axes_node(op, self.names.fresh(name), x, out, [axis], self.opset,
                                    self.names))
        return out

    def reshape(self, x: gs.Tensor, shape: Sequence[int], tag: str) -> gs.Variable:
        return self.op("Reshape", [x, self.ints(shape, f"{tag}_shape")], shape, tag)


@dataclass
class Weights:
    """One direction's recurrent weights: ``r`` is ``R^T`` ``[hidden, G * hidden]``; ``rb_h``
    the GRU's ``Rb`` of its h gate when it stays inside the step (``linear_before_reset``)."""
    r: np.ndarray
    rb_h: Optional[np.ndarray] = None
    _blocks: Dict[Tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)

    def block(self, start: int, stop: int) -> np.ndarray:
        """``r[:, start:stop]``, C-contiguous, one array for every step: the steps' constants
        share it, so lowering and emit make its kernel and text once (``layers/fc.py``)."""
        if (start, stop) not in self._blocks:
            self._blocks[start, stop] = np.ascontiguousarray(self.r[:, start:stop])
        return self._blocks[start, stop]


@dataclass
class Step:
    """What one step reads: its input projection ``x`` (``[N, G * hidden]``, biases in), the
    state before it (None: zero), and sizes."""
    x: gs.Tensor
    h: Optional[gs.Tensor]
    c: Optional[gs.Tensor]
    rows: int
    hidden: int
    tag: str


def _product(b: Builder, h: gs.Tensor, r: np.ndarray, rows: int, tag: str) -> gs.Tensor:
    """``H R^T``: an FC, or a constant for a constant initial state (no layer multiplies two
    constants; numpy's sum of the same terms, within the module's bound)."""
    if isinstance(h, gs.Constant):
        return b.const((np.asarray(h.values, np.float32) @ r).astype(np.float32), f"{tag}_HR")
    return b.op("MatMul", [h, b.const(np.ascontiguousarray(r), f"{tag}_R")],
                [rows, r.shape[1]], f"{tag}fc")


def _recurrent_sum(b: Builder, s: Step, w: Weights, width: int, what: str) -> gs.Tensor:
    """``x + H R^T`` over the first ``width`` columns (x alone for a zero state)."""
    x = s.x if width == w.r.shape[1] else b.columns(s.x, 0, width, s.rows, f"{s.tag}_{what}x")
    if s.h is None:
        return x
    hr = _product(b, s.h, w.block(0, width), s.rows, f"{s.tag}_{what}")
    return b.op("Add", [x, hr], [s.rows, width], f"{s.tag}_{what}sum")


def lstm_step(b: Builder, s: Step, w: Weights):
    """Gates in ONNX's order i, o, f, c: ``C' = f C + i g``, ``H' = o tanh(C')``."""
    n, k, t = s.rows, s.hidden, s.tag
    gates = _recurrent_sum(b, s, w, 4 * k, "")
    i, o = (b.op("Sigmoid", [b.columns(gates, j * k, k, n, f"{t}_{g}")], [n, k], f"{t}_{g}s")
            for j, g in enumerate("io"))
    g = b.op("Tanh", [b.columns(gates, 3 * k, k, n, f"{t}_c")], [n, k], f"{t}_ct")
    c = b.op("Mul", [i, g], [n, k], f"{t}_ig")
    if s.c is not None:  # a zero state: f C = 0, not computed
        f = b.op("Sigmoid", [b.columns(gates, 2 * k, k, n, f"{t}_f")], [n, k], f"{t}_fs")
        c = b.op("Add", [b.op("Mul", [f, s.c], [n, k], f"{t}_fc"), c], [n, k], f"{t}_C")
    h = b.op("Mul", [o, b.op("Tanh", [c], [n, k], f"{t}_tc")], [n, k], f"{t}_H")
    return h, c


def gru_step(b: Builder, s: Step, w: Weights):
    """Gates z, r, h: ``h~ = tanh(x_h + (r H) Rh^T)`` or, linear before reset,
    ``tanh(x_h + r (H Rh^T + Rbh))``; ``H' = (1 - z) h~ + z H``."""
    n, k, t = s.rows, s.hidden, s.tag
    zr = _recurrent_sum(b, s, w, 2 * k, "zr")
    z = b.op("Sigmoid", [b.columns(zr, 0, k, n, f"{t}_z")], [n, k], f"{t}_zs")
    pre = b.columns(s.x, 2 * k, k, n, f"{t}_hx")
    if w.rb_h is not None or s.h is not None:  # else r scales a zero state: not computed
        r = b.op("Sigmoid", [b.columns(zr, k, k, n, f"{t}_r")], [n, k], f"{t}_rs")
    if w.rb_h is not None:  # linear before reset: r scales H Rh^T + Rbh
        hr = b.const(w.rb_h, f"{t}_Rbh")
        if s.h is not None:
            hr = b.op("Add", [_product(b, s.h, w.block(2 * k, 3 * k), n, f"{t}_h"), hr], [n, k],
                      f"{t}_hb")
        pre = b.op("Add", [pre, b.op("Mul", [r, hr], [n, k], f"{t}_rh")], [n, k], f"{t}_hsum")
    elif s.h is not None:
        rh = b.op("Mul", [r, s.h], [n, k], f"{t}_rH")
        pre = b.op("Add", [pre, _product(b, rh, w.block(2 * k, 3 * k), n, f"{t}_h")], [n, k],
                   f"{t}_hsum")
    cand = b.op("Tanh", [pre], [n, k], f"{t}_ht")
    # 1 - z as -z + 1 (negation is exact, so the one rounding is the Sub's): the layer set
    # subtracts activations only, and adds or multiplies by constants.
    minus = b.op("Mul", [z, b.const(np.full((1,), -1, np.float32), f"{t}_neg")], [n, k],
                 f"{t}_mz")
    keep = b.op("Add", [minus, b.const(np.ones((1,), np.float32), f"{t}_one")], [n, k],
                f"{t}_1z")
    h = b.op("Mul", [keep, cand], [n, k], f"{t}_new")
    if s.h is not None:
        h = b.op("Add", [h, b.op("Mul", [z, s.h], [n, k], f"{t}_zH")], [n, k], f"{t}_H")
    return h, None


def rnn_step(b: Builder, s: Step, w: Weights):
    """``H' = tanh(x + H R^T)``."""
    pre = _recurrent_sum(b, s, w, s.hidden, "")
    return b.op("Tanh", [pre], [s.rows, s.hidden], f"{s.tag}_H"), None


STEPS = {"LSTM": lstm_step, "GRU": gru_step, "RNN": rnn_step}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
