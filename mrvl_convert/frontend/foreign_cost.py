"""What ``foreign_int8.py``'s rewrite costs, measured: onnxruntime runs the given QDQ model and
the rewritten one on the same inputs and the outputs are compared.

Contract.
  Requires: two models with the same inputs and outputs (names, static shapes), both runnable
  by onnxruntime's CPU provider.
  Ensures: per output, the largest absolute difference, that difference over the given model's
  peak |output| (``rel``), and the cosine of the two (flattened, over all inputs); nothing is
  changed. Both run with Q/DQ fusion off (``session.disable_quant_qdq``): each QDQ op as the
  model writes it, the reference the int8 verify uses, not onnxruntime's int8 kernels.

The inputs: ``SAMPLES`` seeded draws, each input drawn as the given model reads it, as verify's
default feeds draw it (``vocabulary.input_kinds`` and ``draw_input``): an id input uniform ids
below its vocabulary (the table its ids index, through Reshapes, Casts and constant picks), a
mask ones over a prefix of its last axis (a padded sequence), other integers 0 or 1 (the line
names them: a cost measured on 0/1 says little); a float input that a QuantizeLinear reads
from a normal distribution whose +-3 sigma is the float range that QuantizeLinear covers (the
range the quantizer calibrated), clipped to it, another float input from a standard normal.
Given ``feeds`` (verify or calibration samples) are used instead.
"""
from __future__ import annotations

from typing import AbstractSet, Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mrvl_convert.frontend.float_pairs import Spans
from mrvl_convert.frontend.vocabulary import InputKinds, draw_input, input_kinds, zero_one

SAMPLES = 4
_SEED = 0


def measure(given: onnx.ModelProto, rewritten: Union[onnx.ModelProto, bytes],
            feeds: Optional[Sequence[Mapping[str, np.ndarray]]] = None) -> Dict[str, Any]:
    """``{"inputs": how the inputs were had, "samples": n, "outputs": {name: {"max_abs",
    "rel", "cosine"}}}``, or ``{"error": why}`` when onnxruntime cannot run one of them.
    ``rewritten`` may be given serialized (the caller keeps those bytes too)."""
    kinds = None if feeds else input_kinds(given)
    chosen = list(feeds) if feeds else drawn_feeds(given, kinds)
    how = "given" if feeds else drawn_how(given, kinds)
    try:
        before = _run(given, chosen)
        after = _run(rewritten, chosen)
    except Exception as exc:  # onnxruntime's errors have no common base class
        return {"error": " ".join(str(exc).split())[:300] or type(exc).__name__}
    outputs = {}
    for name in before[0]:
        ref = np.concatenate([np.asarray(b[name], np.float64).reshape(-1) for b in before])
        got = np.concatenate([np.asarray(a[name], np.float64).reshape(-1) for a in after])
        diff = float(np.max(np.abs(ref - got), initial=0.0))
        peak = float(np.max(np.abs(ref), initial=0.0))
        norms = float(np.linalg.norm(ref) * np.linalg.norm(got))
        cosine = float(ref @ got / norms) if norms > 0 else float(diff == 0.0)
        outputs[name] = {"max_abs": diff, "rel": diff / peak if peak > 0 else float(diff > 0),
                         "cosine": cosine}
    return {"inputs": how, "samples": len(chosen), "outputs": outputs}


def summary_text(cost: Mapping[str, Any]) -> str:
    """The worst output's figures in words, for the CLI line."""
    if "error" in cost:
        return f"not measured (onnxruntime: {cost['error']})"
    outputs = cost["outputs"]
    if not outputs:
        return "not measured (no float output)"
    worst = max(outputs, key=lambda k: outputs[k]["rel"])
    figures = outputs[worst]
    return (f"max |diff| {figures['max_abs']:.3g} ({100 * figures['rel']:.2f}% of its peak), "
            f"cosine {figures['cosine']:.5f} at output {worst!r} on {cost['samples']} inputs "
            f"{cost['inputs']}")


def drawn_feeds(model: onnx.ModelProto, kinds: Optional[InputKinds] = None
                ) -> List[Dict[str, np.ndarray]]:
    """``SAMPLES`` seeded feeds for ``model``'s inputs (module docstring); ``kinds``: its
    ``input_kinds`` when the caller has them."""
    rng = np.random.default_rng(_SEED)
    kinds = input_kinds(model) if kinds is None else kinds
    inputs = _inputs(model)
    return [{i.name: _draw(model, i, kinds, rng, sample == 0) for i in inputs}
            for sample in range(SAMPLES)]


def drawn_how(model: onnx.ModelProto, kinds: Optional[InputKinds] = None) -> str:
    """How ``drawn_feeds`` draws ``model``'s inputs, in words for the CLI line: the calibrated
    ranges, and the ids, masks and 0/1 integers where the model has them."""
    kinds = input_kinds(model) if kinds is None else kinds
    parts = ["drawn in the calibrated input ranges"]
    parts += [f"{name} ids below {size}" for name, size in sorted(kinds.vocabularies.items())]
    parts += [f"{name} a padded mask" for name in sorted(kinds.masks)]
    zeros = [i.name for i in _inputs(model) if zero_one(i.name, _dtype(i), kinds)]
    if zeros:
        parts.append(f"{', '.join(zeros)} 0/1 (integer, neither ids nor a mask: the figure "
                     "says little of them)")
    return ", ".join(parts)


def _inputs(model: onnx.ModelProto) -> List[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _dtype(info: onnx.ValueInfoProto) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type))


def _draw(model: onnx.ModelProto, info: onnx.ValueInfoProto, kinds: InputKinds,
          rng: np.random.Generator, first: bool) -> np.ndarray:
    shape = [max(d.dim_value, 1) for d in info.type.tensor_type.shape.dim]
    dtype = _dtype(info)
    span = None if info.name in kinds.vocabularies or dtype.kind != "f" else \
        _quantized_range(model, info.name)
    if span is None:
        return draw_input(info.name, shape, dtype, kinds, rng, first)
    # a standard normal moved into the calibrated range (+-3 sigma covers it); drawn in
    # float64 and rounded once at the end, one draw from rng as draw_input's
    middle, sigma = (span[0] + span[1]) / 2, (span[1] - span[0]) / 6
    return np.clip(middle + sigma * rng.standard_normal(shape), span[0], span[1]).astype(dtype)


def _quantized_range(model: onnx.ModelProto, name: str) -> Optional[tuple]:
    """The float range a per-tensor QuantizeLinear reading ``name`` covers."""
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] == name and node.input[1] in consts:
            scale = consts[node.input[1]].reshape(-1)
            zero = (consts.get(node.input[2]) if len(node.input) > 2 else None)
            zero = np.zeros(1, np.uint8) if zero is None else zero.reshape(-1)
            if scale.size == 1:
                info = np.iinfo(zero.dtype)
                offset = int(zero[0])
                return ((info.min - offset) * float(scale[0]), (info.max - offset) * float(scale[0]))
    return None


def _run(model: Union[onnx.ModelProto, bytes], feeds: Sequence[Mapping[str, np.ndarray]]
         ) -> List[Dict[str, np.ndarray]]:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    data = model if isinstance(model, bytes) else model.SerializeToString()
    session = ort.InferenceSession(data, options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(names, dict(feed)))) for feed in feeds]


def foreign_int8_section(model: onnx.ModelProto, mode: str,
                         feeds: Optional[Sequence[Mapping[str, np.ndarray]]] = None,
                         int8_ops: AbstractSet[str] = frozenset(),
                         spans: Optional[Spans] = None):
    """``model`` brought into the device's int8 (``foreign_int8.bring_foreign_int8``) and
    report.json's ``foreign_int8`` section (what was done, its measured cost, and the line the
    CLI prints), or ``(model, None)`` when it has no foreign QDQ node; third, the rewritten
    model serialized when it was measured, else None (``foreign_kept.kept_model`` keeps those
    bytes: a large model is not serialized twice). ``int8_ops``, ``spans``: as
    ``bring_foreign_int8``."""
    from mrvl_convert.frontend.foreign_int8 import bring_foreign_int8
    rewritten, done = bring_foreign_int8(model, mode, int8_ops, spans)
    if done is None:
        return model, _operator_form(model, mode), None
    if not done.changed:
        line = (f"int8 from another quantizer ({', '.join(done.kinds)}; the device takes "
                f"per-tensor symmetric int8 only): its {len(done.left)} QDQ nodes cannot be "
                f"rewritten (e.g. {done.left[0]!r}) and stay on CPU with their reason")
        return model, {"mode": mode, "kinds": list(done.kinds), "weights": 0,
                       "activations": 0, "biases": 0, "left": list(done.left), "cost": {},
                       "line": line}, None
    serialized = rewritten.SerializeToString()
    cost = measure(model, serialized, feeds)
    counts = (f"{done.weights} weights, {done.activations} activations, "
              f"{done.biases} biases")
    if done.float_pairs:
        counts += (f", {done.float_pairs} activation QDQ pairs between ops of no int8 form "
                   "dropped (those ops run in fp16 inside the int8 region)")
    if done.batchnorms:
        counts += f", {done.batchnorms} BatchNormalizations folded into their Conv"
    if done.dynamic:
        counts += (f", {done.dynamic} dynamic int8 MatMuls (MatMulInteger, scales computed at "
                   "run time) as float MatMuls, in fp16")
    if done.dynamic_convs:
        counts += (f", {done.dynamic_convs} dynamic int8 Convs (ConvInteger, scales computed "
                   "at run time) as float Convs, in fp16")
    if done.dynamic_lstms:
        counts += (f", {done.dynamic_lstms} DynamicQuantizeLSTMs as float LSTMs (weights "
                   "dequantized)")
    if done.fp16_because:
        action = (f"run in fp16, as --foreign-int8 fp16 does, though requantize was asked: "
                  f"{done.fp16_because}; its QDQ nodes removed ({counts})")
    elif not (done.weights or done.activations or done.biases):
        # dynamic int8 only: nothing was requantized, whatever mode was asked
        action = (f"run in fp16 (its scales are computed at run time, which the device's "
                  f"int8 cannot carry): {counts}")
    elif mode == "requantize":
        action = (f"requantized to per-tensor symmetric int8 (--foreign-int8 requantize, the "
                  f"default; --foreign-int8 fp16 runs them in fp16 instead): {counts}")
    else:
        action = f"run in fp16 (--foreign-int8 fp16): its QDQ nodes removed ({counts})"
    line = (f"int8 from another quantizer ({', '.join(done.kinds)}; the device takes "
            f"per-tensor symmetric int8 only): {action}; cost against the given QDQ model: "
            f"{summary_text(cost)}")
    if done.left:
        line += f"; {len(done.left)} QDQ nodes left as they are (e.g. {done.left[0]!r})"
    operators = _operator_form(rewritten, mode)
    if operators is not None:
        line += "; " + operators["line"]
    section = {"mode": mode, "kinds": list(done.kinds), "weights": done.weights,
               "activations": done.activations, "biases": done.biases,
               "batchnorms": done.batchnorms, "dynamic": done.dynamic,
               "dynamic_convs": done.dynamic_convs, "dynamic_lstms": done.dynamic_lstms,
               "float_pairs": done.float_pairs,
               "left": list(done.left), "cost": cost, "line": line}
    if done.fp16_because:
        section["fp16_because"] = done.fp16_because
    return rewritten, section, serialized


# onnxruntime's operator-form int8 (QuantFormat.QOperator, dynamic quantization): no QDQ pair
# to requantize; none of these ops has a Marvell layer.
OPERATOR_INT8 = ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearConv",
                 "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul", "DynamicQuantizeLSTM",
                 "DynamicQuantizeMatMul", "QAttention", "MatMulIntegerToFloat")


def _operator_form(model: onnx.ModelProto, mode: str) -> Optional[Dict[str, Any]]:
    """report.json's ``foreign_int8`` for a model in onnxruntime's operator-form int8 (the ops
    and their counts, nothing rewritten), or None when it has none."""
    counts: Dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in OPERATOR_INT8:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    if not counts:
        return None
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(counts.items(), key=lambda i: -i[1]))
    line = (f"int8 from another quantizer in operator form ({ops}): no QDQ node to requantize "
            f"or run in fp16; these ops have no Marvell layer and stay on CPU")
    return {"mode": mode, "kinds": [f"operator-form int8 ({ops})"], "weights": 0,
            "activations": 0, "biases": 0, "left": [], "cost": {}, "line": line}
