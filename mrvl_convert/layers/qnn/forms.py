"""Which layers of a Mrvl subgraph do not compute onnxruntime's run of the QDQ model exactly, by
their form, and how far they may be from it: report.json's ``int8_forms``.

Every int8 form of ``layers/qnn`` equals onnxruntime's run of the QDQ model as written by
construction (the float op through onnxruntime, elementwise float32 ops, selections, tables
onnxruntime filled), except:

- an fp16 layer between quant layers of the same stage: a float op the layer set has no int8
  form of (Softmax), or a node left in float (``--keep-fp16``). It computes in fp16 what
  onnxruntime computes in float32 between the DequantizeLinear and the QuantizeLinear. Softmax:
  an input error of 2^-11 |x| (fp16) moves p_i by at most 2 p_i max|dx| and the fp16 result
  adds 2^-11 p_i, so the error before quantizing is at most
  (2^-10 L + 2^-11) p_i / output_scale steps, L the largest input magnitude
  (127 input_scale): at most one step while L < 7.5 (p_i / output_scale <= 127). Measured in
  docs/QUANTIZATION.md.
- an int8 layer the lowering marked (``Layer.inexact``): an FC whose weights were permuted to
  read an NHWC flatten (its float32 sum runs in another order than the model's Gemm), a Conv2D
  or FC whose bias scale is not input_scale x weight_scale in float32 (the Nodes-JSON has no
  room for another one). Each can be one step off where a value lies within float32 rounding
  of a rounding boundary.
"""
from __future__ import annotations

from typing import Any, Dict, List

from mrvl_convert.ir.layout import Layer, MrvlSubgraph

#: Kinds that only move or select bytes: exact in any dtype.
_MOVERS = frozenset({"layout_transform", "reshape", "nn.batch_flatten", "squeeze", "expand_dims",
                     "transpose", "Concat", "Split", "StridedSlice", "Maxpool2D", "Resize2D"})
FP16_FORM = "fp16 layer between quant layers"
_SOFTMAX_BOUND = ("at most (2^-10 L + 2^-11) p / output_scale steps before quantizing, L the "
                  "largest input magnitude: one step while L < 7.5")
_FP16_BOUND = ("the dequantized input and the result rounded to fp16 (2^-11 relative each): "
               "a step where a value lies that close to a rounding boundary")


def inexact_layers(sub: MrvlSubgraph) -> List[Dict[str, Any]]:
    """One entry per layer of ``sub`` whose form is not exact against onnxruntime's run of the
    QDQ model, in layer order: layer name, layer_name, source nodes, form and bound."""
    first = len(sub.input_layouts)
    producers = {first + k: layer for k, layer in enumerate(sub.layers)}
    readers: Dict[int, List[Layer]] = {}
    for layer in sub.layers:
        for value in layer.inputs:
            readers.setdefault(int(value), []).append(layer)
    entries = []
    for k, layer in enumerate(sub.layers):
        form = layer.inexact or _fp16_form(layer, [producers.get(int(v)) for v in layer.inputs],
                                           readers.get(first + k, []))
        if form:
            entries.append({"layer": f"{sub.name}_{k}", "layer_name": layer.kind,
                            "source_nodes": list(layer.source_nodes), "form": form})
    return entries


def _fp16_form(layer: Layer, sources: List[Any], readers: List[Layer]) -> str:
    """An fp16 layer next to the int8 region: it reads dequantized int8 or feeds a quantize.
    A layer that only moves the dequantized int8 values is exact (an int8 value times its scale
    rounded to fp16 quantizes back to itself: |q| 2^-11 < 1/2), and so is one that moves a
    float32 stage input only quant layers read (it goes in unrounded: ``quantized_inputs``);
    one that moves a stage input others read rounds it to fp16 first, which quantizing need
    not undo."""
    if layer.dtype != "float32" or layer.kind == "quant":
        return ""
    dequantized = [s is not None and s.kind == "quant" and "input_scale" in s.attrs
                   for s in sources]
    quantized = any(r.kind == "quant" and "output_scale" in r.attrs for r in readers)
    if not (any(dequantized) or quantized) or (layer.kind in _MOVERS and all(dequantized)):
        return ""
    if layer.kind in _MOVERS and all(s is None for s in sources) and readers and all(
            r.kind == "quant" and "output_scale" in r.attrs for r in readers):
        return ""  # a stage input only quant layers read goes in unrounded (runtime/program.py)
    bound = _SOFTMAX_BOUND if layer.kind == "Softmax" else _FP16_BOUND
    return f"{FP16_FORM}: {bound}"
