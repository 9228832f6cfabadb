"""Which exact layers of an int8 artifact's Mrvl stage read values the simulator left unrounded.

The simulator rounds a subgraph input to fp16 unless only quant layers read it (through layers
that move bytes: ``runtime/program.py quantized_inputs``), and rounds no exact layer's result.
verify's int8 reference (``kept_fp16.py``) rounds an exact layer's inputs only where these say
the simulator did, so it computes what the artifact computes (exact: no value is changed here,
only which layers the reference rounds is decided).

- requires: a Mrvl stage's steps by value index, and the indices of its rounded inputs;
- ensures: ``rounded_results`` the exact non-quant layers whose result is made of a rounded
  input; ``moves_unrounded`` True for an exact layer none of whose inputs holds a rounded value.
"""
from __future__ import annotations

from typing import AbstractSet, Any, Dict, Sequence, Set


def moves_unrounded(step: Any, steps: Dict[int, Any], rounded: AbstractSet[int],
                    holding: AbstractSet[int]) -> bool:
    """An exact layer (one that moves bytes: a flatten of the float32 stage input before the
    first quant layer) none of whose inputs the simulator rounded: a subgraph input only quant
    layers read (``InputNode.fp16`` False: ``runtime/program.py quantized_inputs``) or an exact
    layer's result not in ``holding`` (``rounded_results``). The simulator rounds neither its
    inputs nor its result, so neither may the reference: rounding there moved a float32 input
    lying near a quantization boundary by one int8 step (openwakeword's timer: Flatten ->
    QuantizeLinear -> Gemm ... Softmax)."""
    if not step.kernel.exact:
        return False
    return all(index not in rounded if index not in steps else
               steps[index].kernel.exact and index not in holding for index in step.inputs)


def rounded_results(steps: Sequence[Any], rounded: AbstractSet[int]) -> Set[int]:
    """The exact non-quant layers (``steps`` in run order) whose result holds a subgraph input
    the simulator rounds to fp16, through exact layers (layout_transforms with no source node):
    a Concat of dequantized stage inputs behind its layout_transforms is a Concat of fp16 values
    (ICLabelNet: the reference concatenated them unrounded, and its int8 Conv's input moved by
    one step). A quant layer's result is int8 or ``q * scale``: nothing rounded. One pass."""
    holding: Set[int] = set()
    for step in steps:
        if step.kernel.exact and step.spec.layer_name != "quant" and any(
                index in holding or index in rounded for index in step.inputs):
            holding.add(step.node)
    return holding
