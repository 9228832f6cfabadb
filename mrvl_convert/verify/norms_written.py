"""The rounded int8 reference computes a tf-spelled LayerNorm in the converter's algebra.

``frontend/norm_forms.py`` rewrites tf's batchnorm formula ``x * s + (beta - m * s)`` (``s = r *
gamma``: a Keras ``LayerNormalization`` as tf2onnx writes it) into ``(x - m) * r * gamma +
beta``; in an int8 artifact those are fp16 layers (Mul2D, Mul2D, Sum2D), each rounded. The QDQ
model keeps tf's spelling: verify's rounded reference (``kept_fp16.py``) rounded only the nodes
the layers name as their sources (the final Add, the Rsqrt) and computed ``x * s`` and ``m * s``
in float32: the two sums are equal in real arithmetic but land on neighbouring fp16 values for
about half the elements (bert_pron: 2085 of 4096 of its first LayerNorm's output one fp16 step
apart), 45 of them one int8 step apart after its QuantizeLinear, and a BERT's FFN and residual
carry that to its output (0.14 of its peak: a false FAIL). Here the reference is given the same
rewrite before it is rounded, so each rounded step is the artifact's step.

Requires: the QDQ model named as the converter names nodes (``name_nodes``) and the artifact's
session. Ensures: where the artifact holds a layer of a node ``norm_forms`` derives (its name,
as fresh names are deterministic), the model's norms are rewritten as ``rewrite_norms`` rewrites
them, their GlobalAveragePool moments first made ReduceMeans as ``norm_pools.py`` makes them
(both bounds in those docstrings: float32 rounding, which the fp16 roundings then take over);
otherwise the model is unchanged. Returns whether it changed.
"""
from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.core.toposort import toposort
from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.folded_shapes import folded_shapes
from mrvl_convert.frontend.norm_forms import rewrite_norms
from mrvl_convert.frontend.norm_pools import pools_as_norm_means
from mrvl_convert.runtime.session import HybridSession


def norms_as_written(proto: onnx.ModelProto, session: HybridSession, opset: int) -> bool:
    """Rewrite ``proto``'s tf-spelled norms as the artifact's layers compute them (module
    docstring), in place; whether any was."""
    sources = {name for stage in session.stages if stage.kind == "mrvl"
               for step in stage.runner.steps for name in step.spec.source_nodes}
    if not _derived_from_an_add(sources, proto):
        return False  # no norm rewritten: no shapes inferred (a conversion's worth of folding)
    graph = gs.import_onnx(proto)
    if not _shapes_from(graph, _static_shapes(proto, session)):
        return False
    done = Rewrites()
    pools_as_norm_means(graph, opset, done)  # tf2onnx's 3-D GlobalAveragePool moments first
    if not rewrite_norms(graph, opset, done) or not sources.intersection(done.derived):
        return False  # the artifact computes no rewritten norm: the model is its reference
    toposort(graph.cleanup(remove_unused_graph_inputs=False))  # graphsurgeon 0.5.2's saw a cycle
    written = gs.export_onnx(graph, do_type_check=False)
    proto.graph.CopyFrom(written.graph)
    return True


def _derived_from_an_add(sources: Set[str], proto: onnx.ModelProto) -> bool:
    """Whether a layer names a node the model lacks whose name is a fresh name derived from an
    Add of the model (``norm_forms._Builder.node``: ``<Add>_mul``, ``<Add>_mul_3``)."""
    nodes = {n.name for n in proto.graph.node}
    adds = {n.name for n in proto.graph.node if n.op_type == "Add"}
    return any(s.rsplit("_mul", 1)[0] in adds for s in sources - nodes if "_mul" in s)


def _static_shapes(proto: onnx.ModelProto, session: HybridSession
                   ) -> Dict[str, Tuple[List[int], Any]]:
    """Every tensor's shape and element type as the converter knows them: the artifact's input
    shapes fixed, the shape arithmetic folded (tf2onnx's Tensordot: Shape -> Gather -> Concat
    -> Reshape), on a copy, as ``canonicalize`` does; empty when the copy cannot be loaded."""
    return folded_shapes(proto, {spec.name: list(spec.shape) for spec in session.input_specs})


def _shapes_from(graph: gs.Graph, shapes: Dict[str, Tuple[List[int], Any]]) -> bool:
    """Give ``graph``'s tensors the static ``shapes`` and their types (the reference's own
    graph is left as it is: no fold changes its nodes); whether there were any."""
    for name, tensor in graph.tensors().items():
        if isinstance(tensor, gs.Variable) and name in shapes:
            tensor.shape, tensor.dtype = shapes[name]
    return bool(shapes)
