"""Issue 43 finding 6: the codegen report (manifest.json ``codegen``) is computed by the rule
checks ``--layer-set upstream-0.19`` converts with, so it cannot call a layer v0.19's that those
rules refuse, and it names the int8 kinds no public codegen emits as such."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import numpy as np
import onnx
import pytest

import mrvl_convert
from support import corpus
from support.models import Builder

# Every model of the test corpus (tests/support/corpus*.py): name -> (model, options).
def _extra() -> Dict[str, Tuple[Callable[[], onnx.ModelProto], Dict[str, Any]]]:
    from support import corpus_audio, corpus_bytes, corpus_dynamo, corpus_int8
    audio = {"shapes": {k: v for k, v in corpus_audio.SHAPES.items()},
             "values": {"sr": 16000}}
    return {"audio_vad": (corpus_audio.audio_vad, audio),
            "byte_classifier": (corpus_bytes.byte_classifier, {}),
            "svtr_bn1d": (corpus_bytes.svtr_bn1d, {}),
            "dynamo_bert": (corpus_dynamo.dynamo_bert, {"shapes": corpus_dynamo.bert_shapes()}),
            "prelu_net": (corpus_int8.prelu_net, {}), "unet": (corpus_int8.unet, {}),
            "unet_transposed": (corpus_int8.unet_transposed, {})}


CORPUS = tuple(corpus.BUILT) + ("example",) + tuple(_extra())


def _broadcast_sum() -> onnx.ModelProto:
    """conv -> Add(x, gate) with gate [1, C, 1, 1] from a global pool: a Sum2D whose second
    operand broadcasts, which the newer set takes and v0.19's mrvl.sum2d refuses."""
    b = Builder(seed=3)
    x = b.input("x", [1, 4, 8, 8])
    y = b.conv(x, 4, 4, pads=[1, 1, 1, 1])
    gate = b.op("GlobalAveragePool", [y], name="pool")
    s = b.op("Add", [y, gate], name="bcast_add")
    return b.model([b.conv(s, 4, 4, pads=[1, 1, 1, 1])])


def _layers(out: Path) -> Counter:
    """The rule-made Mrvl layers of an artifact: (layer_name, composite, source nodes)."""
    manifest = json.loads((out / "manifest.json").read_text())
    layers: Counter = Counter()
    for stage in manifest["stages"]:
        if stage["kind"] != "mrvl":
            continue
        for node in json.loads((out / stage["nodes_json"]).read_text())["nodes"]:
            attrs = node["attrs"]
            if node["op"] == "tvm_op" and attrs["rule"] != ["layout"]:
                layers[(attrs["layer_name"][0], attrs["composite_name"][0],
                        tuple(attrs["source_nodes"]))] += 1
    return layers


def test_a_broadcasting_sum_is_beyond_v019_with_the_rules_reason(tmp_path) -> None:
    model = _broadcast_sum()
    codegen = mrvl_convert.convert(model, tmp_path / "m").manifest["codegen"]
    assert codegen["layer_set"] == "marvell"
    kinds = {k["kind"]: k for k in codegen["beyond_upstream"]}
    entry = kinds["Sum2D beyond v0.19's rules"]
    assert entry["layers"] == 1 and entry["composites"] == ["mrvl.sum2d"]
    assert entry["reasons"] and entry["reasons"][0].startswith("mrvl.sum2d: ")
    # The upstream set indeed leaves that Add on CPU.
    upstream = mrvl_convert.convert(model, tmp_path / "u", layer_set="upstream-0.19",
                                    min_compute_layers=0)
    assert "bcast_add" not in {s for k in _layers(tmp_path / "u") for s in k[2]}
    assert upstream.manifest["codegen"]["layer_set"] == "upstream-0.19"


def _convert_both(name: str, tmp_path: Path) -> Tuple[Dict, Counter, Counter]:
    extra = _extra()
    if name in extra:
        model, options = extra[name][0](), extra[name][1]
    else:
        model = corpus.model(name)
        options = {"shapes": corpus.shapes_for(name) if name != "example" else None}
    marvell = mrvl_convert.convert(model, tmp_path / "marvell", **options)
    mrvl_convert.convert(model, tmp_path / "upstream", layer_set="upstream-0.19", **options)
    return marvell.manifest["codegen"], _layers(tmp_path / "marvell"), \
        _layers(tmp_path / "upstream")


@pytest.mark.parametrize("name", CORPUS)
def test_the_report_and_the_upstream_set_agree(tmp_path, name) -> None:
    """v0.19 only <=> ``--layer-set upstream-0.19`` converts the model to the same Mrvl
    layers (layer kind, composite and nodes of each)."""
    codegen, marvell, upstream = _convert_both(name, tmp_path)
    same = marvell == upstream
    assert (codegen["layer_set"] == "upstream-0.19") == same, (
        codegen, sorted(set(marvell) ^ set(upstream))[:6])
    if not same:
        # Every layer the report calls v0.19's is one the upstream set makes too.
        beyond = sum(k["layers"] for k in codegen["beyond_upstream"])
        assert beyond >= 1


def _quantized_unet(tmp_path: Path, name: str):
    from mrvl_convert.quantize import Quantization
    from support import corpus_int8
    model = getattr(corpus_int8, name)()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    calibration = {model.graph.input[0].name:
                   np.random.default_rng(0).standard_normal([4, *shape[1:]]).astype(np.float32)}
    return mrvl_convert.convert(model, tmp_path / name, quantize=Quantization(calibration))


def test_int8_conv_transpose_is_named_as_no_public_codegen(tmp_path) -> None:
    codegen = _quantized_unet(tmp_path, "unet_transposed").manifest["codegen"]
    kinds = {k["kind"]: k for k in codegen["beyond_upstream"]}
    entry = kinds["int8 Conv2DTranspose"]
    assert entry["no_public_codegen"] is True
    assert entry["composites"] == ["mrvl.qnn_conv2d_transpose"]
    assert "no_public_codegen" not in kinds["int8 layers"]  # its int8 Conv2Ds are the codegen's


def test_no_public_table_names_rules_that_exist() -> None:
    from mrvl_convert.emit.codegen import NO_PUBLIC_INT8
    from mrvl_convert.rules.loader import load_rules
    names = {r.name: r.layer for r in load_rules()}
    for composite, layer in NO_PUBLIC_INT8:
        assert names[composite] == layer


def test_the_cli_line_says_no_public_codegen_emits_the_kind(tmp_path) -> None:
    from mrvl_convert.batch.outcome import Outcome
    from mrvl_convert.cli.output import codegen_line
    result = _quantized_unet(tmp_path, "unet_transposed")
    outcome = Outcome("u.onnx", "u", "ok", str(tmp_path / "u"),
                      codegen=result.manifest["codegen"])
    line = codegen_line(outcome, tmp_path)
    unemitted = line.split("no public codegen emits ")[1].split(" as such")[0]
    assert "int8 Conv2DTranspose x" in unemitted and "int8 layers" not in unemitted


def test_a_users_rule_counts_as_it_would_under_the_upstream_set(tmp_path) -> None:
    """ARCHITECTURE.md's user.unsqueeze rule (reshape, a kind v0.19 emits): with the same rule
    file (its priority above the newer set's expand_dims) both sets convert the Unsqueeze to the
    same layer, and the report says v0.19."""
    rule = tmp_path / "unsqueeze.yaml"
    rule.write_text("format_version: 1\ncomposites:\n  - name: user.unsqueeze\n"
                    "    layer: reshape\n    priority: 200\n    pattern:\n      - {role: main, op: [Unsqueeze]}\n"
                    "    constraints:\n      - {role: main, check: keeps_batch, "
                    "reason: \"batch changes: {detail}\"}\n")
    b = Builder(seed=5)
    x = b.input("x", [1, 4, 8])
    y = b.op("Unsqueeze", [x, b.const(np.array([3], np.int64))], name="unsq")
    model = b.model([b.conv(y, 4, 4, pads=[1, 1, 1, 1])])
    marvell = mrvl_convert.convert(model, tmp_path / "m", rules=[rule])
    mrvl_convert.convert(model, tmp_path / "u", rules=[rule], layer_set="upstream-0.19")
    same = _layers(tmp_path / "m") == _layers(tmp_path / "u")
    assert same and marvell.manifest["codegen"]["layer_set"] == "upstream-0.19", (
        marvell.manifest["codegen"], _layers(tmp_path / "m"), _layers(tmp_path / "u"))
