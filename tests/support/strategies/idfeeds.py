"""Models whose integer inputs are ids, masks, or neither, as exporters write them
(``mrvl_convert.frontend.vocabulary.input_kinds``): token ids gathered from a ``[vocab, C]``
embedding (through Cast/Reshape/Unsqueeze); an attention mask read additively (``(1 - mask) *
-big`` added to the scores, optionally through Unsqueeze/Expand, T5's and BERT's export) or as a
Where's condition (``mask == 0`` or ``Not(Cast(mask, bool))``, DistilBERT's), int64, int32 or
bool; and decoys that are neither: a length compared with a computed range
(``Less(Range(T), length)``, a Where's condition through a comparison with no constant) and an
integer count cast and added to the output.

``idfeed_from_spec(spec)`` rebuilds a case from its flat spec; ``idfeed_models()`` draws one.
The case's ``spec`` also says what each input is: ``vocab``, ``mask``, ``decoys``."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto

from support.models import Builder
from support.strategies.generated import GeneratedModel

MASK_FORMS = ("additive", "equal_where", "not_where")
MASK_TYPES = {"int64": TensorProto.INT64, "int32": TensorProto.INT32, "bool": TensorProto.BOOL}
DECOYS = ("length", "count")


class IdFeedModel(GeneratedModel):
    rebuilt_by = "idfeed_from_spec"


def _ids(b: Builder, spec: dict) -> str:
    """ids [1, T] -> (Cast) -> Gather of the [vocab, C] embedding -> [1, T, C]."""
    t, c = spec["tokens"], spec["dim"]
    ids = b.input("ids", [1, t], TensorProto.INT64 if spec["ids_int64"] else TensorProto.INT32)
    if spec["ids_cast"]:
        ids = b.op("Cast", [ids], to=TensorProto.INT64)
    table = b.const(b.rng.uniform(-1, 1, (spec["vocab"], c)).astype(np.float32), "embedding")
    return b.op("Gather", [table, ids], name="embed")


def _mask_bias(b: Builder, spec: dict, scores: str) -> str:
    """The Softmax of ``scores`` [1, T, T] with the keys ``mask`` [1, T] says are padding out."""
    t = spec["tokens"]
    mask = b.input("mask", [1, t], MASK_TYPES[spec["mask_type"]])
    view = b.op("Unsqueeze", [mask, b.const(np.array([1], np.int64))])
    if spec["expand"]:
        view = b.op("Expand", [view, b.const(np.array([1, t, t], np.int64))])
    form = spec["mask_form"]
    if form == "additive":
        keep = b.op("Cast", [view], to=TensorProto.FLOAT)
        drop = b.op("Sub", [b.const(np.array(1.0, np.float32)), keep])
        bias = b.op("Mul", [drop, b.const(np.array(-1e4, np.float32))])
        return b.op("Softmax", [b.op("Add", [scores, bias])], axis=-1)
    if form == "equal_where":
        zero = b.const(np.array(False) if spec["mask_type"] == "bool" else
                       np.array(0, np.int64 if spec["mask_type"] == "int64" else np.int32))
        pad = b.op("Equal", [view, zero])
    else:
        pad = b.op("Not", [b.op("Cast", [view], to=TensorProto.BOOL)])
    masked = b.op("Where", [pad, b.const(np.array(-1e4, np.float32)), scores])
    return b.op("Softmax", [masked], axis=-1)


def _decoy(b: Builder, kind: str, y: str, spec: dict) -> str:
    t = spec["tokens"]
    if kind == "length":  # keeps the first `length` query rows: Less(Range(T), length)
        length = b.input("length", [], TensorProto.INT64)
        pos = b.op("Range", [b.const(np.array(0, np.int64)), b.const(np.array(t, np.int64)),
                             b.const(np.array(1, np.int64))])
        valid = b.op("Unsqueeze", [b.op("Less", [pos, length]),
                                   b.const(np.array([0, 2], np.int64))])
        return b.op("Where", [valid, y, b.const(np.array(0.0, np.float32))])
    count = b.op("Cast", [b.input("count", [1, 1, 1], TensorProto.INT64)], to=TensorProto.FLOAT)
    return b.op("Add", [y, count])


def idfeed_from_spec(spec: dict) -> IdFeedModel:
    """The model of ``spec``: embedded ids, their self-attention scores masked by ``mask``
    (if drawn), weights applied to the embeddings, then each decoy."""
    b = Builder(spec["seed"])
    x = _ids(b, spec)
    scores = b.op("MatMul", [x, b.op("Transpose", [x], perm=[0, 2, 1])])
    weights = _mask_bias(b, spec, scores) if spec["mask_form"] != "none" else \
        b.op("Softmax", [scores], axis=-1)
    y = b.op("MatMul", [weights, x])
    for kind in spec["decoys"]:
        y = _decoy(b, kind, y, spec)
    return IdFeedModel(b.model([y]), {}, f"ids {spec['vocab']}, mask {spec['mask_form']}, "
                                          f"decoys {spec['decoys']}", spec)


@st.composite
def idfeed_models(draw) -> IdFeedModel:
    return idfeed_from_spec({
        "seed": draw(st.integers(0, 2 ** 16)), "tokens": draw(st.integers(2, 12)),
        "dim": draw(st.sampled_from([2, 4])), "vocab": draw(st.integers(3, 500)),
        "ids_int64": draw(st.booleans()), "ids_cast": draw(st.booleans()),
        "mask_form": draw(st.sampled_from(MASK_FORMS + ("none",))),
        "mask_type": draw(st.sampled_from(sorted(MASK_TYPES))), "expand": draw(st.booleans()),
        "decoys": draw(st.lists(st.sampled_from(DECOYS), unique=True, max_size=2))})
