"""Constant folding within bounds, and quietly.

graphsurgeon folds a constant subgraph by running it in onnxruntime, and a 200-byte model can ask
for gigabytes that way (``ConstantOfShape([16384, 16384]) -> ReduceSum``). So a node is folded
only while what folding creates stays within bounds taken from the model itself:

- every output of a folded node is at most ``max(64 MiB, 4 x the model's largest initializer)``
  bytes (4x: an int8 or float16 weight cast to float32 is folded, however large the model);
- all outputs of all folded nodes together are at most ``max(256 MiB, 4 x all initializers)``
  bytes (an upper bound on what onnxruntime holds while folding);
- the multiply-accumulates of folded Conv/MatMul/Gemm nodes are at most 2**32 in all (time);
- a node whose output size shape inference cannot tell is folded only when that size follows
  from its inputs' (Reshape, Cast...) or from their constant values (Range, ConstantOfShape,
  Expand, Tile: ``sized_ops.py``), and Loop/Scan are never folded (no bound on their time).

An If whose condition folds to a constant becomes the branch it chooses (``branches.py``), and
folding goes on into it.

graphsurgeon folds in ``fold_view.py``'s view of the graph: the nodes it may fold and their
readers, not the whole graph it would copy and clean up each time (the same result).

A node beyond a bound is left as it is: it runs on CPU, as it would in onnxruntime, and
``canonicalize`` reports why it was not folded. The converter never runs it (verify does).

graphsurgeon prints its warnings on stdout (``[W] Inference failed...``) and the onnxruntime
sessions it opens print theirs on stderr; both are silenced while we fold, unless verbose
(``mrvl-convert -v``, which sets ``MRVL_CONVERT_VERBOSE=1`` for its worker processes).
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.logger import G_LOGGER

from mrvl_convert.core.cleanup import cleanup
from mrvl_convert.core.graph import static_shape
from mrvl_convert.core.macs import MAC_OPS, node_macs
from mrvl_convert.frontend.branches import flatten_decided_ifs
from mrvl_convert.frontend.fold_view import fold_view, lower_constant_nodes
from mrvl_convert.frontend.sized_ops import fold_sliced_shapes, sized_shape

VERBOSE_ENV = "MRVL_CONVERT_VERBOSE"
TENSOR_FLOOR = 64 << 20
TOTAL_FLOOR = 256 << 20
WEIGHT_FACTOR = 4
MAX_MACS = 1 << 32
# Fold every constant within our bounds: graphsurgeon's own threshold (on the subgraph's outputs
# only, after computing them) would only add its "large outputs" warning.
_NO_SIZE_LIMIT = 1 << 62
# Ops whose output has as many elements as their first input (so a size shape inference could
# not tell is still known): the size bound holds through them.
_SAME_SIZE = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity",
                        "Cast", "CastLike", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp",
                        "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Not",
                        "Erf", "Clip"})
_NEVER = {"Loop": "a Loop's run time has no bound", "Scan": "a Scan's run time has no bound"}
_FATAL_ONLY, _QUIET, _WARNINGS = 4, 3, 2  # onnxruntime log severities
# graphsurgeon's logger is one object per process: one conversion at a time sets and restores it
# (re-entrant: canonicalize holds it around folding, which takes it too).
_LOGGER_LOCK = threading.RLock()


@dataclass(frozen=True)
class FoldBounds:
    tensor_bytes: int
    total_bytes: int
    macs: int = MAX_MACS

    @classmethod
    def of(cls, graph: gs.Graph) -> "FoldBounds":
        """The bounds for this model: from the bytes of its initializers."""
        sizes = [_nbytes(t.shape, t.dtype) or 0 for t in graph.tensors().values()
                 if isinstance(t, gs.Constant)]
        return cls(tensor_bytes=max(TENSOR_FLOOR, WEIGHT_FACTOR * max(sizes, default=0)),
                   total_bytes=max(TOTAL_FLOOR, WEIGHT_FACTOR * sum(sizes)))


@dataclass
class _Budget:
    """graphsurgeon's ``should_exclude_node``: asked about each foldable node, in topological
    order, once per folding pass; answers (and counts) each node once."""
    bounds: FoldBounds
    used_bytes: int = 0
    used_macs: int = 0
    sizes: Dict[str, int] = field(default_factory=dict)    # tensor -> bytes (folded ones)
    answers: Dict[int, Tuple[gs.Node, bool]] = field(default_factory=dict)
    refused: Dict[str, str] = field(default_factory=dict)  # node name -> why not folded

    def __call__(self, node: gs.Node) -> bool:
        if id(node) not in self.answers:  # the node is kept too: its id stays its own
            self.answers[id(node)] = (node, self._exclude(node))
        return self.answers[id(node)][1]

    def _exclude(self, node: gs.Node) -> bool:
        why = _NEVER.get(node.op)
        sizes = [self._size(node, t) for t in node.outputs]
        if why is None and any(s is None for s in sizes):
            why = ("its output size is unknown before computing it (shape inference cannot "
                   "tell it)")
        total = sum(s or 0 for s in sizes)
        macs = node_macs(node) if node.op in MAC_OPS else 0
        if why is None and max(sizes, default=0) > self.bounds.tensor_bytes:
            why = (f"its output would take {_mib(max(sizes))}, more than the "
                   f"{_mib(self.bounds.tensor_bytes)} a folded tensor of this model may take")
        elif why is None and self.used_bytes + total > self.bounds.total_bytes:
            why = (f"folding it would bring what folding creates to "
                   f"{_mib(self.used_bytes + total)}, more than the "
                   f"{_mib(self.bounds.total_bytes)} folding this model may create")
        elif why is None and self.used_macs + macs > self.bounds.macs:
            why = (f"folding it would take {self.used_macs + macs} multiply-accumulates, more "
                   f"than the {self.bounds.macs} folding may spend")
        if why is not None:
            self.refused[node.name] = f"not computed at conversion time: {why}; it runs on CPU"
            return True
        self.used_bytes += total
        self.used_macs += macs
        self.sizes.update((t.name, s) for t, s in zip(node.outputs, sizes))
        return False

    def _size(self, node: gs.Node, tensor: gs.Tensor) -> Optional[int]:
        size = _nbytes(static_shape(tensor), tensor.dtype)
        if size is None and node.outputs and tensor is node.outputs[0]:
            size = _nbytes(sized_shape(node), tensor.dtype)
        if size is not None or node.op not in _SAME_SIZE or not node.inputs:
            return size
        source = node.inputs[0]
        known = (self.sizes.get(source.name) if not isinstance(source, gs.Constant)
                 else _nbytes(source.shape, source.dtype))
        if known is None:
            return None
        # Elements stay; the element type may widen (Cast to float64 at most 8 bytes each).
        return known // max(_itemsize(source.dtype) or 1, 1) * 8


def fold_constants(graph: gs.Graph, verbose: Optional[bool] = None,
                   bounds: Optional[FoldBounds] = None,
                   origins: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Fold ``graph``'s constant subgraphs within ``bounds`` (default ``FoldBounds.of(graph)``);
    returns the nodes left unfolded by a bound, each with the reason. ``origins`` (filled):
    each node a decided If's branch put in the graph -> that If (``branches.py``)."""
    budget = _Budget(bounds or FoldBounds.of(graph))
    with quiet_third_parties(verbose):
        while True:  # each round flattens an If at least, or ends
            fold_sliced_shapes(graph)
            lower_constant_nodes(graph)
            # graphsurgeon's own flattening loses an If's outputs but the first (branches.py);
            # it folds the same in the part of the graph it can change (fold_view.py), faster
            (fold_view(graph) or graph).fold_constants(error_ok=True, size_threshold=_NO_SIZE_LIMIT,
                                 should_exclude_node=budget, flatten_subgraphs=False)
            cleanup(graph)
            if not flatten_decided_ifs(graph, origins):
                return budget.refused


def verbose_requested() -> bool:
    """``MRVL_CONVERT_VERBOSE`` set (not empty, not 0): show third-party warnings."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


@contextlib.contextmanager
def quiet_third_parties(verbose: Optional[bool] = None) -> Iterator[None]:
    """Inside: graphsurgeon's logger silent and onnxruntime's default logger at fatal errors only
    (a subgraph onnxruntime cannot fold logs an error, yet folding goes on without it), unless
    ``verbose`` (default: ``verbose_requested()``): then both as they are, onnxruntime's at
    warnings. After: graphsurgeon's level restored, onnxruntime's at errors only (it has no
    getter to restore from; every session of ours sets its own level anyway)."""
    verbose = verbose_requested() if verbose is None else verbose
    import onnxruntime as ort
    if verbose:
        ort.set_default_logger_severity(_WARNINGS)
        yield
        return
    with _LOGGER_LOCK:
        saved = G_LOGGER.severity
        G_LOGGER.severity = G_LOGGER.CRITICAL + 1
        ort.set_default_logger_severity(_FATAL_ONLY)
        try:
            yield
        finally:
            G_LOGGER.severity = saved
            ort.set_default_logger_severity(_QUIET)


def _nbytes(shape: Optional[List[int]], dtype: object) -> Optional[int]:
    if shape is None or any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        return None
    return math.prod(int(d) for d in shape) * (_itemsize(dtype) or 8)


def _itemsize(dtype: object) -> Optional[int]:
    if dtype is None:
        return None
    try:
        if isinstance(dtype, (int, np.integer)):  # an ONNX element type
            return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(dtype))).itemsize)
        return int(np.dtype(dtype).itemsize)
    except (TypeError, KeyError, ValueError):
        return None


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB" if size >= 1 << 20 else f"{size} bytes"
