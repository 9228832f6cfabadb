"""Issue 40: each artifact says which codegen it needs (manifest.json ``codegen``,
``emit/codegen.py``): whether every Mrvl layer is one of upstream TVM v0.19's twelve kinds, the
codegen Marvell's released flow pins, and if not which kinds go beyond them, whichever
``--layer-set`` converted it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.emit.codegen import UPSTREAM_KINDS, needs
from support import corpus
from support.models import Builder, small_cnn
from support.transformer_ops import layer_norm_op, token_front

REF = Path(__file__).parents[1] / "data" / "reference"


def test_the_twelve_kinds_are_upstream_v019s() -> None:
    assert UPSTREAM_KINDS == {"Conv2D", "FC", "Maxpool2D", "Avgpool2D", "GlobalAvgpool2D",
                              "GlobalMaxpool2D", "Sum2D", "Concat", "reshape",
                              "nn.batch_flatten", "squeeze", "layout_transform"}


def test_what_upstream_v019_wrote_needs_only_upstream_v019() -> None:
    """The Nodes-JSON upstream TVM 0.19's codegen wrote for the RFC's CNN: the classifier must
    find every one of its layers within v0.19, or it would misjudge every artifact."""
    document = json.loads((REF / "rfc_fashion_cnn.upstream-nodes.json").read_text())
    assert needs([document]) == {"layer_set": "upstream-0.19", "beyond_upstream": []}


@pytest.mark.parametrize("model", [REF / "rfc_fashion_cnn.onnx", Path(__file__).parents[2]
                                   / "examples" / "mnist_cnn" / "mnist_cnn.onnx"])
def test_the_rfc_cnn_under_the_default_set_needs_only_upstream_v019(tmp_path, model) -> None:
    result = mrvl_convert.convert(model, tmp_path / "rfc")
    assert result.manifest["options"].get("layer_set", "marvell") == "marvell"
    assert result.manifest["codegen"] == {"layer_set": "upstream-0.19", "beyond_upstream": []}
    written = json.loads((tmp_path / "rfc" / "manifest.json").read_text())
    assert written["codegen"] == result.manifest["codegen"]


def _sigmoid_cnn() -> "onnx.ModelProto":
    b = Builder(seed=1)
    x = b.input("x", [1, 3, 8, 8])
    y = b.op("Sigmoid", [b.conv(x, 3, 4, pads=[1, 1, 1, 1])], name="gate")
    y = b.op("Relu", [b.conv(y, 4, 4, pads=[1, 1, 1, 1])], name="relu")
    return b.model([b.op("Sigmoid", [y], name="head")])


def test_a_sigmoid_is_named_beyond_upstream(tmp_path) -> None:
    result = mrvl_convert.convert(_sigmoid_cnn(), tmp_path / "sig", min_compute_layers=0)
    codegen = result.manifest["codegen"]
    assert codegen["layer_set"] == "marvell"
    kinds = {k["kind"]: k for k in codegen["beyond_upstream"]}
    assert kinds["Conv2D+sigmoid"]["layers"] == 1  # the gate, fused into its Conv
    assert kinds["Sigmoid"] == {"kind": "Sigmoid", "layers": 1, "composites": ["mrvl.sigmoid"]}


def test_the_same_model_under_upstream_set_needs_upstream(tmp_path) -> None:
    result = mrvl_convert.convert(_sigmoid_cnn(), tmp_path / "sig", layer_set="upstream-0.19")
    assert result.manifest["codegen"] == {"layer_set": "upstream-0.19", "beyond_upstream": []}


def test_a_layer_norm_names_its_chain(tmp_path) -> None:
    b = Builder(opset=17)
    y = layer_norm_op(b, token_front(b, [1, 4, 8]), 8)
    model = b.model([b.op("MatMul", [y, b.weight(8, 8)], name="after")])
    codegen = mrvl_convert.convert(model, tmp_path / "ln").manifest["codegen"]
    kinds = {k["kind"]: k for k in codegen["beyond_upstream"]}
    assert codegen["layer_set"] == "marvell"
    assert {"ReduceMean", "Sub", "Mul2D", "Rsqrt"} <= set(kinds)
    assert kinds["Mul2D"]["composites"] == ["mrvl.layer_norm"]
    assert kinds["FC on a 3-D tensor"]["layers"] == 2  # token FCs: v0.19's FC is 2-D only
    assert [k["layers"] for k in codegen["beyond_upstream"]] == sorted(
        (k["layers"] for k in codegen["beyond_upstream"]), reverse=True)


@pytest.mark.parametrize("sigmoid", [False, True])
def test_every_upstream_set_artifact_needs_upstream(tmp_path, sigmoid) -> None:
    model = small_cnn(sigmoid=sigmoid)
    result = mrvl_convert.convert(model, tmp_path / "m", layer_set="upstream-0.19")
    assert result.manifest["codegen"]["layer_set"] == "upstream-0.19"


def test_an_int8_artifact_needs_the_newer_codegen(tmp_path) -> None:
    from mrvl_convert.quantize import Quantization
    calibration = {"x": np.random.default_rng(0).standard_normal((4, 3, 16, 16))
                   .astype(np.float32)}
    result = mrvl_convert.convert(small_cnn(), tmp_path / "q",
                                  quantize=Quantization(calibration))
    codegen = result.manifest["codegen"]
    assert codegen["layer_set"] == "marvell"
    assert [k["kind"] for k in codegen["beyond_upstream"]] == ["int8 layers"]
    assert "mrvl.qnn_conv2d" in codegen["beyond_upstream"][0]["composites"]


def test_cli_md_names_the_twelve_kinds_the_classifier_uses() -> None:
    """docs/CLI.md tells the user which kinds upstream v0.19 emits: the list must stay the one
    the classifier checks against."""
    text = " ".join((Path(__file__).parents[2] / "docs" / "CLI.md").read_text().split())
    listed = re.search(r"whose codegen emits twelve composites: (.*?), in float", text).group(1)
    names = {n.strip() for n in listed.replace(" and ", ", ").split(",")}
    assert names == UPSTREAM_KINDS and len(names) == 12


@pytest.mark.parametrize("name", corpus.BUILT)
def test_what_the_upstream_set_makes_needs_only_upstream(tmp_path, name) -> None:
    """The classifier and the upstream set's rules agree: every artifact made with
    ``--layer-set upstream-0.19`` is reported as needing only v0.19's codegen."""
    result = mrvl_convert.convert(corpus.built(name), tmp_path / name,
                                  layer_set="upstream-0.19", shapes=corpus.shapes_for(name))
    assert result.manifest["codegen"] == {"layer_set": "upstream-0.19", "beyond_upstream": []}


@pytest.mark.parametrize("name, beyond", [
    ("densenet_block", []), ("shufflenet_unit", []), ("mobilenet_v2", [("Clip", 10)]),
    ("bert_tiny", [("Mul2D", 15), ("Sum2D beyond v0.19's rules", 8), ("FC on a 3-D tensor", 6), ("ReduceMean", 6), ("Rsqrt", 3),
                   ("Sub", 3), ("transpose", 3), ("BatchMatmul", 2), ("Softmax", 1)])])
def test_the_corpus_under_the_default_set(tmp_path, name, beyond) -> None:
    """The figures docs/CLI.md quotes."""
    codegen = mrvl_convert.convert(corpus.built(name), tmp_path / name).manifest["codegen"]
    assert [(k["kind"], k["layers"]) for k in codegen["beyond_upstream"]] == beyond
    assert codegen["layer_set"] == ("marvell" if beyond else "upstream-0.19")
