"""Marvell's deployment rules for int8 artifacts, and whether an artifact meets them (report.json
``device.int8_flow``; absent for an artifact with no int8 layer).

What Marvell's released flow requires of a pre-quantized (QDQ) model, from TVM's
``python/tvm/relay/op/contrib/mrvl.py`` (``MrvlPartitionGraphValidate.validate_partitioned_graph``,
``add_attributes``) and DPDK's ``lib/mldev/mldev_utils_neon.c`` / ``mldev_utils_scalar.c``
(docs: shared reference ``marvell-layer-set.md``):

- ``one_region``: one accelerator region. More raises "Multi partition model is not supported in
  pre_quantized flow yet".
- ``no_cpu_op``: no op left to the CPU (the same check counts every LLVM call).
- ``one_precision``: ``-quantize=`` is one setting for the whole compile, copied to every region;
  an fp16 layer between int8 ones (``--keep-fp16``, a Softmax with no int8 form) is a mixed
  model, which the flow does not document.

Every artifact with int8 layers is judged, whether the converter quantized it (``--quantize
int8`` writes the QDQ model it converts) or the user gave a QDQ model: the flow sees a QDQ model
either way. A rule not met does not change ``device.fits`` (the model loads; what is in doubt is
compiling it with the released flow): the verdict says which rule and why.

Input quantization: where a Mrvl subgraph quantizes a float input (a ``quant`` layer with
``output_scale`` reading the subgraph's input), the device's host does it
(``cnxk_ml_io_quantize``): x / scale rounded half away from zero, clamped to [-127, 127] on
arm64 (NEON; the scalar path to [-128, 127]). The simulator follows onnxruntime's QuantizeLinear
instead, as the QDQ model it is verified against does: rounded half to even, saturated to
[-128, 127], so that every int8 layer stays bit-equal to onnxruntime's run of the QDQ model. The
two differ by exactly one int8 step (one ``scale`` after dequantization) on an element whose
x / scale lies exactly halfway between two integers with the even one nearer zero, or below
-127.5 (arm64 only); equal everywhere else. ``input_quantization`` names each such input with its
scale, so the bound is a figure.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

from mrvl_convert.core.artifact import first_value
from mrvl_convert.emit.codegen import is_int8

RULES = {
    "one_region": ("a pre-quantized (QDQ) model is one accelerator region: Marvell's flow "
                   "raises 'Multi partition model is not supported in pre_quantized flow yet' "
                   "otherwise (TVM mrvl.py validate_partitioned_graph)"),
    "no_cpu_op": ("a pre-quantized (QDQ) model has no op on the CPU (the same check counts "
                  "every op outside the accelerator region)"),
    "one_precision": ("-quantize is one setting for the whole compile: int8 and fp16 layers in "
                      "one model are not documented in Marvell's flow"),
    "host_rounding": ("the host quantizes a float input to int8 as x / scale rounded half away "
                      "from zero, clamped to [-127, 127] on arm64 (DPDK mldev_utils_neon.c); "
                      "the simulator rounds half to even and saturates to [-128, 127] as ONNX "
                      "QuantizeLinear (and the QDQ model) does: at most one int8 step apart, "
                      "only at exact half steps or below -127.5 steps"),
}

Documents = Callable[[str], Tuple[Mapping[str, Any], Any]]


def int8_flow(manifest: Mapping[str, Any], stage_docs: Documents) -> Dict[str, Any]:
    """report.json ``device.int8_flow`` of an artifact with int8 layers (empty dict without):
    each rule, the figures it is judged on, ``meets`` and one reason line per rule not met."""
    mrvl = [s["name"] for s in manifest["stages"] if s["kind"] == "mrvl"]
    cpu = [s["name"] for s in manifest["stages"] if s["kind"] != "mrvl"]
    layers = {name: _layers(stage_docs(name)[0]) for name in mrvl}
    if not any(is_int8(attrs) for found in layers.values() for attrs in found):
        return {}
    fp16 = sorted({str(first_value(attrs.get("layer_name"))) for found in layers.values()
                   for attrs in found if not is_int8(attrs)})
    reasons: List[str] = []
    if len(mrvl) != 1:
        reasons.append(f"one_region: {len(mrvl)} Mrvl subgraphs")
    if cpu:
        reasons.append(f"no_cpu_op: {len(cpu)} CPU stages ({', '.join(cpu[:3])}"
                       f"{', ...' if len(cpu) > 3 else ''})")
    if fp16:
        reasons.append(f"one_precision: fp16 layers among the int8 ones ({', '.join(fp16[:5])})")
    return {"rules": dict(RULES), "mrvl_subgraphs": len(mrvl), "cpu_stages": len(cpu),
            "fp16_layers": fp16, "meets": not reasons, "reasons": reasons,
            "input_quantization": [entry for name in mrvl
                                   for entry in _input_quants(name, stage_docs(name)[0])]}


def _layers(document: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    return [node["attrs"] for node in document["nodes"] if node["op"] == "tvm_op"]


def _input_quants(stage: str, document: Mapping[str, Any]) -> Sequence[Dict[str, Any]]:
    """The quant layers that quantize one of the subgraph's float inputs: the host's work on
    the device, and where its rounding and the simulator's part."""
    nodes = document["nodes"]
    found = []
    for node in nodes:
        attrs = node["attrs"]
        if node["op"] != "tvm_op" or first_value(attrs.get("layer_name")) != "quant" \
                or "output_scale" not in attrs:
            continue
        source = nodes[node["inputs"][0][0]]
        if source["op"] == "input":
            scale = float(first_value(attrs["output_scale"]))
            found.append({"subgraph": stage, "tensor": source["name"], "scale": scale,
                          "max_difference": scale})
    return found


def line(name: str, flow: Mapping[str, Any]) -> str:
    """The CLI's line for an int8 artifact: the rules met or not, and the rounding note."""
    if not flow:
        return ""
    verdict = ("meets Marvell's pre-quantized rules (one region, no CPU op, one precision)"
               if flow["meets"] else
               "does not meet Marvell's pre-quantized rules: " + "; ".join(flow["reasons"]))
    steps = flow["input_quantization"]
    rounding = (f"; the host rounds its {len(steps)} quantized input(s) half away from zero "
                "(clamp +-127 on arm64) where the simulator rounds half to even: at most one "
                "step apart, at exact half steps" if steps else "")
    return f"{name}: int8: {verdict}{rounding}; see report.json device.int8_flow"
