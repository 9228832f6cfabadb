"""Max and Min in the fp16 floor as the device computes them.

The device has no maximum or minimum layer: ``layers/_minmax.py`` lowers ``Max(f, o)`` as
``o + Relu(f - o)`` and ``Min(f, o)`` as ``f - Relu(f - o)``, the gap ``f - o`` rounded to fp16
before the last layer adds or subtracts it: where the operand chosen is the one the gap comes
back to, a second rounding, up to half an fp16 step of ``|f - o|``. Max of two rounded values,
as the floor computed it, never rounds: the floor left that cost out, and a correct artifact was
judged against a floor it cannot reach. deepcut's chain of eleven Keras Maximums (issue 45):
over 300 random samples on ids over its vocabulary, the artifact's output error rms 1.29e-3,
the floor's 4.7e-4, the floor with this lowering 1.14e-3; 8 samples said "far above the fp16
floor (5x): a converter defect", while the artifact without the simulator's rounding matches
onnxruntime within 4e-7.

Operands of one shape are pooled instead, exactly (``layers/_max_pairs.py``): a Max/Min whose
inputs all have its output's shape is left as it is. Each other two-input float Max or Min of
the floor is therefore computed as the lowering writes it,
with the int8 reference's own steps (``kept_fp16.minmax_steps``, the same operand choice
``full_operand``). A Max/Min of more operands, or one whose result is never rounded (integers,
shapes), is left as it is, and so is one the artifact runs on CPU (onnxruntime's Max there
is exact) when the artifact is known (``verify.compare``: ``device_nodes``); without it (the
corpus's floor of a model) every one is lowered.

- requires: the floor's copy after its rounding pass (each input of a Max/Min its rounded
  name), and ``protected``: the tensors never rounded;
- ensures: each such Max/Min replaced by Sub, Relu, a Cast pair and Add (Max) or Sub (Min),
  writing the same output name; the nodes left for the caller to sort (``topologically_sorted``).
"""
from __future__ import annotations

from typing import AbstractSet, Optional, Set

import onnx

from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.verify.kept_fp16 import full_operand, minmax_steps
from mrvl_convert.verify.minmax_pools import pooled_minmax
from mrvl_convert.verify.kept_graph import WorkingGraph


def device_nodes(session: HybridSession) -> Set[str]:
    """The ONNX nodes the artifact's Mrvl layers compute (their source nodes)."""
    return {name for stage in session.stages if stage.kind == "mrvl"
            for step in stage.runner.steps for name in step.spec.source_nodes}


def lower_minmax(proto: onnx.ModelProto, protected: AbstractSet[str],
                 on_device: Optional[AbstractSet[str]] = None) -> int:
    """Each two-input Max/Min of ``proto`` whose result is rounded, as the device lowers it
    (module docstring), in place; how many were lowered. ``on_device``: the nodes the
    artifact runs on Mrvl (``device_nodes``; its nodes named as the converter names them):
    only those are lowered; None: every one (no artifact known)."""
    found = [n for n in proto.graph.node if n.op_type in ("Max", "Min")
             and len(n.input) == 2 and n.output[0] not in protected
             and (on_device is None or n.name in on_device)]
    if not found:
        return 0
    # the operand of the output's shape, as the lowering picks it, needs every shape: a model
    # as given need not carry value infos of its intermediate tensors
    shaped = onnx.shape_inference.infer_shapes(proto)
    pools = pooled_minmax(shaped, infer=False)
    found = [n for n in found if (n.name or n.output[0]) not in pools]  # one shape: exact
    if not found:
        return 0
    graph = WorkingGraph(proto.graph)
    for node in found:
        full = full_operand(shaped, node)
        node.name = node.name or node.output[0]  # the steps are named from it: unique
        minmax_steps(graph, node, full)
    graph.commit()
    return len(found)
