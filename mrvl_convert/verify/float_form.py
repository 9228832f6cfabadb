"""The float model the quantization analysis maps an artifact's layers through.

A layer's ``source_nodes`` name nodes of the graph the converter lowered: the QDQ model after
``quantize_int8``'s rewrites (BatchNormalization folded into its Conv, PRelu decomposed) and
after the converter's own canonicalization (a Sum of three inputs as two Adds, ...). So the
float tensor a layer stands for is found in the float model put through the same rewrites:
``quantized_float_form`` (``quantize.recipe``), then ``canonicalize`` (``frontend``), both of
which keep the names of the nodes and tensors they do not change. Every rewrite there is exact
in float32 but BatchNormalization folding, whose bound ``fold_bn.py`` states; so a tensor that
the float model itself has takes its reference from the float model, and only the tensors the
rewrites add (a decomposed PRelu's steps, a Sum's partial sums) from this form.

- requires: the float model, named as the converter names nodes (``name_nodes``), and the
  artifact's session;
- ensures: a float ``ModelProto`` onnxruntime can run; when the canonicalization refuses the
  model (a shape it cannot fix), the ``quantized_float_form`` alone.
"""
from __future__ import annotations

import warnings
from typing import List

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.frontend.canonicalize import canonicalize
from mrvl_convert.frontend.load import load_model
from mrvl_convert.quantize.recipe import quantized_float_form
from mrvl_convert.runtime.session import HybridSession


def mapped_form(proto: onnx.ModelProto, session: HybridSession) -> onnx.ModelProto:
    """The float model as the artifact's layers saw it (module docstring)."""
    form = quantized_float_form(proto, _batchnorms_of(session, proto),
                                equalize=equalized(session))
    shapes = {spec.name: list(spec.shape) for spec in session.input_specs}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a shape override is the artifact's own, said then
            # the norms the artifact scaled, scaled alike (exact): the rounded reference
            # computes them in range as the artifact does
            scales = (session.manifest.get("options") or {}).get("norm_scales")
            graph = canonicalize(load_model(form, shapes=shapes), verbose=False,
                                 norm_scales=scales).graph
            return gs.export_onnx(graph, do_type_check=False)
    except MrvlConvertError:
        return form


def equalized(session: HybridSession) -> bool:
    """The artifact was quantized with cross-layer equalization (``--equalize``): the float
    tensors between an equalized pair are scaled per channel, so every reference comes from the
    form, none from the float model as given."""
    quantization = session.manifest.get("quantization")
    return isinstance(quantization, dict) and quantization.get("equalize") is True


def _batchnorms_of(session: HybridSession, proto: onnx.ModelProto) -> List[str]:
    """The BatchNormalizations a layer of the artifact names as its source: the converter
    took them itself (an fp16 Conv2D fusing its BN, a standalone one), so they stay in the
    float form; only a BN folded before quantizing (named by no layer) is folded there."""
    named = {n for s in session.stages if s.kind == "mrvl" for step in s.runner.steps
             for n in step.spec.source_nodes}
    return [n.name for n in proto.graph.node if n.op_type == "BatchNormalization"
            and n.name in named]
