"""The reference side of a comparison: the original (or QDQ) model on fp32 onnxruntime.

What ``compare`` and ``analyze_quantization`` share: the feeds both sides run on, the model
loaded and checked against the artifact's inputs, and one onnxruntime session that also hands
out every tensor compared (``reference_session``, run by ``run_reference``).

- requires: a model path or ``ModelProto`` and the ``HybridSession`` of the artifact made from it;
- ensures: random feeds draw each input as the model reads it (``random_feeds``: ids below
  their vocabulary, masks as padded sequences, other integers 0/1 and named); a model that
  cannot be loaded or run raises ``ModelLoadError``, one whose inputs are
  not the artifact's (names, static dimensions) ``ShapeError``, both naming the model; a
  ``ModelProto`` handed in is copied, never changed.
"""
from __future__ import annotations

import warnings
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from mrvl_convert.errors import InputShapeOverrideWarning, ModelLoadError, ShapeError
from mrvl_convert.frontend.input_shapes import fix_input_shapes, static_dim
from mrvl_convert.runtime.options import QUIET, ort_options, qdq_as_written
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.runtime.stages import DTYPES, TensorSpec
from mrvl_convert.frontend.vocabulary import InputKinds, draw_input, input_kinds, zero_one

Feed = Dict[str, np.ndarray]


def random_feeds(inputs: Sequence[TensorSpec], seed: int, samples: int,
                 kinds: Optional[InputKinds] = None) -> List[Feed]:
    """Seeded feeds, one dict per sample, each input drawn as ``kinds`` says what it holds
    (``vocabulary.input_kinds`` of the model; None: nothing known) by ``vocabulary.draw_input``:
    ids below their vocabulary, a mask ones over a prefix of its last axis, any other float
    input standard normal and any other integer or bool input 0/1 (``zero_one_inputs`` names
    them: a verdict on 0/1 says little about a model that reads them as numbers)."""
    kinds = kinds or InputKinds()
    rng = np.random.default_rng(seed)
    return [{spec.name: draw_input(spec.name, spec.shape, DTYPES[spec.dtype][0], kinds, rng,
                                   first=sample == 0) for spec in inputs}
            for sample in range(samples)]


def zero_one_inputs(inputs: Sequence[TensorSpec], kinds: Optional[InputKinds],
                    pinned: Collection[str] = ()) -> List[str]:
    """The inputs ``random_feeds`` draws as 0/1: integer or bool, neither ids nor a mask, not
    pinned at conversion (``pinned``: those names)."""
    kinds = kinds or InputKinds()
    return [spec.name for spec in inputs
            if zero_one(spec.name, DTYPES[spec.dtype][0], kinds) and spec.name not in pinned]


def zero_one_note(names: Sequence[str]) -> str:
    """What a verdict on random samples says of the inputs drawn as 0/1 ('' when none is)."""
    if not names:
        return ""
    listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (f"input{'s' if len(names) > 1 else ''} {listed} drawn as 0/1 (integer, neither ids "
            "nor a mask): give --verify-inputs (mrvl-verify --inputs) for a meaningful verdict")


def default_feeds(model: Any, inputs: Sequence[TensorSpec], seed: int,
                  samples: int) -> List[Feed]:
    """``random_feeds`` of the inputs as ``model`` (a path or ``ModelProto``; None: not
    known) reads them."""
    return random_feeds(inputs, seed, samples,
                        None if model is None else input_kinds(load_model(model)))


def sample_feeds(session: HybridSession, inputs: Any, seed: int, samples: int,
                 kinds: Optional[InputKinds] = None) -> List[Feed]:
    """``inputs`` as a list of feeds: one dict, a list of them, or None for ``samples`` seeded
    random feeds of the session's input shapes (``random_feeds``, drawn as ``kinds`` says; an
    input pinned at conversion, the manifest's ``options.values``, at its value: the artifact
    computes the model for it only)."""
    if inputs is None:
        return [{**feed, **session.pinned_values}
                for feed in random_feeds(session.input_specs, seed, samples, kinds)]
    if isinstance(inputs, Mapping):
        return [dict(inputs)]
    return [dict(feed) for feed in inputs]


def load_model(model: Any) -> onnx.ModelProto:
    """The model to run: a copy of a ``ModelProto``, or the file loaded."""
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    try:
        return onnx.load(str(model))
    except Exception as exc:  # onnx raises protobuf/OS errors of several kinds
        raise ModelLoadError(f"cannot load the original model: {exc}", model=str(model)) \
            from None


def model_label(model: Any) -> str:
    """How errors name the model: its path, or a ``ModelProto``'s graph name."""
    return str(model) if not isinstance(model, onnx.ModelProto) else (
        model.graph.name or "<ModelProto>")


def check_model_inputs(proto: onnx.ModelProto, session: HybridSession, label: str) -> None:
    """The original model must take the inputs the artifact was converted for (same names, and
    no static dimension that disagrees), or onnxruntime refuses the feeds with its own error.
    An input whose static dims the conversion overrode (``--input-shape``, the manifest's
    ``input_shape_overrides``) is given the same override here, in ``proto``, when the model
    declares what the manifest says was declared: the reference runs at the artifact's shape."""
    inits = {t.name for t in proto.graph.initializer}
    declared = {i.name: i for i in proto.graph.input if i.name not in inits}
    _override_inputs(proto, declared, session, label)
    for spec in session.input_specs:
        value = declared.get(spec.name)
        if value is None:
            raise ShapeError(f"has no input of this name, but the artifact {session.artifact_dir} "
                             "takes one: is it the model the artifact was converted from?",
                             model=label, tensor=spec.name)
        dims = value.type.tensor_type.shape.dim
        static = [d.dim_value if static_dim(d) else None for d in dims]
        if len(static) != len(spec.shape) or any(
                d is not None and d != want for d, want in zip(static, spec.shape)):
            raise ShapeError(f"has shape {static} but the artifact {session.artifact_dir} was "
                             f"converted for {list(spec.shape)}: is it the model the artifact was "
                             "converted from?", model=label, tensor=spec.name)


def _override_inputs(proto: onnx.ModelProto, declared: Mapping[str, onnx.ValueInfoProto],
                     session: HybridSession, label: str) -> None:
    """The conversion's static-dim overrides applied to ``proto`` (``fix_input_shapes``, as the
    frontend applied them), its inferred shapes dropped: they were the declared shape's."""
    recorded = session.manifest.get("model", {}).get("input_shape_overrides", {})
    used = {spec.name: list(spec.shape) for spec in session.input_specs}
    shapes = {name: used[name] for name, entry in recorded.items()
              if name in declared and name in used
              and _declared_dims(declared[name]) == list(entry.get("declared", []))}
    if not shapes:
        return
    with warnings.catch_warnings():  # the conversion said it once; verify follows it
        warnings.simplefilter("ignore", InputShapeOverrideWarning)
        fix_input_shapes(proto, shapes, label)
    del proto.graph.value_info[:]
    for output in proto.graph.output:
        output.type.tensor_type.ClearField("shape")


def _declared_dims(value: onnx.ValueInfoProto) -> List[Any]:
    """An input's dims as the manifest records them (a size, a name, or None)."""
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in value.type.tensor_type.shape.dim]


def rewrite_label(label: str, how: str) -> str:
    """How an error names verify's rewrite of the model ``label`` (``how``: what it changed):
    a failure there is mrvl_convert's, not the model's."""
    return (f"mrvl_convert's rewrite of {label} for verify ({how}; a bug in mrvl_convert if "
            "it fails: the model as given is not at fault)")


def element_types(proto: onnx.ModelProto) -> Dict[str, str]:
    """The element type of every tensor shape inference can type (int8 inside a QDQ model's
    int8 regions), by the manifest's dtype names."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # the layer rows then assume float32, as for any untyped tensor
        return {}
    names = {np.dtype(v[0]).name: k for k, v in DTYPES.items()}
    types = {}
    for info in list(inferred.graph.value_info) + list(inferred.graph.output):
        elem = info.type.tensor_type.elem_type
        if elem:
            name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name
            if name in names:
                types[info.name] = names[name]
    return types


ORIGINAL = "the original model"


def reference_session(proto: onnx.ModelProto, specs: Sequence[TensorSpec],
                      log_severity: int = QUIET, what: str = ORIGINAL) -> Any:
    """fp32 onnxruntime on the original model with every compared tensor as a graph output
    (declared by name and element type only: intermediate shapes need no value_info); a QDQ
    model runs as written (``qdq_as_written``), the semantics the int8 layers simulate.
    ``proto`` gets those outputs added (in a QDQ model each as an Identity of the tensor the
    nodes read: ``_outputs_apart``). ``what``: how an error names the model run (verify's
    own rewrite of it is named as such: ``rewrite_label``, never blamed on the user's model)."""
    existing = {o.name for o in proto.graph.output}
    # A float16 model's tensors are float32 in the artifact (its float32 twin): declared as
    # the model as given makes them, or onnxruntime refuses the output.
    given = element_types(proto) if _mentions_float16(proto) and specs else {}
    for spec in specs:
        if spec.name not in existing:
            dtype = given.get(spec.name, spec.dtype)
            elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(DTYPES[dtype][0]))
            proto.graph.output.append(onnx.helper.make_tensor_value_info(spec.name, elem, None))
    _clear_of_fusion_names(proto)
    plain = proto.SerializeToString()
    apart = any(n.op_type in _QDQ for n in proto.graph.node) and _outputs_apart(
        proto, [s.name for s in specs if s.name not in existing])
    try:
        return _session(proto.SerializeToString() if apart else plain, log_severity)
    except Exception as exc:
        failed = exc
    # onnxruntime 1.32's fusions (a GELU's) can drop a tensor the apart Identity reads ("is not
    # ... output of a previous node"): the model as it was, its outputs read directly
    try:
        if not apart:
            raise failed
        session = _session(plain, log_severity)
    except Exception:
        raise ModelLoadError(f"onnxruntime cannot run {what}: {failed}",
                             model=proto.graph.name or None) from None
    proto.ParseFromString(plain)
    return session


def _session(data: bytes, log_severity: int) -> ort.InferenceSession:
    return ort.InferenceSession(data, qdq_as_written(ort_options(log_severity)),
                                providers=["CPUExecutionProvider"])


_QDQ = ("QuantizeLinear", "DequantizeLinear")


def _outputs_apart(proto: onnx.ModelProto, names: Sequence[str]) -> bool:
    """Each node-made tensor of ``names`` handed out as an Identity of it, the model's nodes
    reading it under another name, in place: the same values. Why: onnxruntime's transpose
    optimizer (onnxruntime 1.32 does, 1.18 did not), moving a Transpose that follows a graph
    output in a QDQ model, puts a Quantize/Dequantize pair before it and gives the pair's
    output the graph output's name, so the output read is the tensor rounded to the int8
    grid and clamped to its range (the Unsqueeze before the first Quantize of a frame-lifted
    input). An output of its own, that no node reads, it leaves as the model computes it.
    True when it changed the model."""
    graph = proto.graph
    made = {out for node in graph.node for out in node.output}
    # a model handed out once already (its proto reused for another session) stays as it is
    inner = {name: f"{name}__apart" for name in names
             if name in made and f"{name}__apart" not in made}
    if not inner:
        return False
    nodes = []
    for node in graph.node:
        node.input[:] = [inner.get(name, name) for name in node.input]
        probes = [name for name in node.output if name in inner]
        node.output[:] = [inner.get(name, name) for name in node.output]
        nodes += [node] + [onnx.helper.make_node("Identity", [inner[name]], [name],
                                                 name=f"{name}__apart") for name in probes]
    graph.ClearField("node")
    graph.node.extend(nodes)
    return True


# The shape initializers onnxruntime's MatMulAddFusion (1.2x and later; not 1.18) adds for an
# N-D MatMul + Add, named so whatever the graph holds: a model onnxruntime optimized once
# (``quant_pre_process`` writes them) in which verify's rewrite makes a new such pair (an
# unrolled cell's input projection) failed to load, "Attempt to replace the existing tensor"
# (rec-model's onnxruntime-QDQ rows).
_ORT_FUSION_NAMES = ("gemm_input_shape", "gemm_output_shape")


def _clear_of_fusion_names(proto: onnx.ModelProto) -> None:
    """The model's own tensors named as in ``_ORT_FUSION_NAMES`` renamed (a suffix), in place;
    a graph input or output keeps its name. Only names change: the same computation."""
    graph = proto.graph
    kept = {v.name for v in list(graph.input) + list(graph.output)}
    names = {n: f"{n}__of_the_model" for n in _ORT_FUSION_NAMES if n not in kept}
    for item in list(graph.initializer) + list(graph.value_info):
        item.name = names.get(item.name, item.name)
    for node in graph.node:
        for field in (node.input, node.output):
            for k, name in enumerate(field):
                if name in names:
                    field[k] = names[name]


def _as_declared(reference: Any, feed: Feed) -> Feed:
    floats = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
    declared = {i.name: floats.get(i.type) for i in reference.get_inputs()}
    return {name: value.astype(declared[name]) if declared.get(name) is not None and
            isinstance(value, np.ndarray) and value.dtype.kind == "f" and
            value.dtype != declared[name] else value for name, value in feed.items()}


def _mentions_float16(proto: onnx.ModelProto) -> bool:
    """Whether the main graph has a float16 weight, input, output or Cast to float16."""
    f16 = onnx.TensorProto.FLOAT16
    graph = proto.graph
    return (any(t.data_type == f16 for t in graph.initializer)
            or any(v.type.tensor_type.elem_type == f16 for v in list(graph.input) +
                   list(graph.output))
            or any(n.op_type == "Cast" and any(a.name == "to" and a.i == f16
                                               for a in n.attribute) for n in graph.node))


def run_reference(reference: Any, names: List[str], feed: Feed, proto: onnx.ModelProto,
                  what: str = ORIGINAL) -> List[Any]:
    """The tensors ``names`` of one run of ``reference`` on ``feed`` (``what``: as
    ``reference_session``); a float feed of another float type than the model's input (an int8
    artifact of a float16 model takes float32, the QDQ model of its float32 twin) is given in
    the model's (float16: rounded as its Cast would)."""
    try:
        return reference.run(names, _as_declared(reference, feed))
    except Exception as exc:  # onnxruntime's untyped errors
        text = str(exc).strip().splitlines()
        raise ModelLoadError(f"onnxruntime fails on {what}: "
                             f"{text[0][:400] if text else type(exc).__name__}",
                             model=proto.graph.name or None) from None
