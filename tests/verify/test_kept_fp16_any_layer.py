"""The kept-fp16 reference is exact for any layer kept (issue 43, finding 2): keeping a Conv
whose input is a hard-swish's ``/ 6`` (a Div the converter lowers as Mul2D by fp16(1/6)) made
the reference divide in float32 where the artifact multiplies by the rounded reciprocal, and a
correct conversion exited 3 (max_abs 0.012). Every Conv of a MobileNetV3 kept alone (slow), two
kept together, and a planted wrong weight that still fails."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from mrvl_convert.cli.convert import main as convert_main
from mrvl_convert.cli.verify import main as verify_main
from support.corpus_int8 import int8_corpus
from support.int8 import output_scale
from support.planted import plant_wrong_weight

MODEL = int8_corpus("mobilenet_v3_small")
CONVS = [n.name for n in MODEL.graph.node if n.op_type == "Conv"]
DEFAULT = {"Conv_130", "Conv_2", "Conv_189"}  # Conv_130 reads Div_128 (a hard-swish's / 6)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("any_layer")
    onnx.save(MODEL, str(tmp / "mnv3.onnx"))
    rng = np.random.default_rng(0)
    np.savez(tmp / "cal.npz", x=rng.uniform(-1, 1, (16, 3, 64, 64)).astype(np.float32))
    return tmp


def _convert(data, out, kept):
    args = [str(data / "mnv3.onnx"), "-o", str(out), "-q", "--quantize", "int8",
            "--calibration", str(data / "cal.npz"), "--verify"]
    code = convert_main(args + [a for node in kept for a in ("--keep-fp16", node)])
    row = json.loads((out / "summary.json").read_text())["models"][0]
    return code, row


def _check_exact(data, out, kept):
    code, row = _convert(data, out, kept)
    assert code == 0, row["error"]
    # kept_fp16.py's bound: only the order of a layer's float32 sums differs, which can move
    # a value lying within float32 rounding of an int8 boundary by one step
    step = output_scale(onnx.load(str(out / "mnv3" / "mnv3.int8.onnx")))
    assert all(o["max_abs"] <= step for o in row["verify"]["outputs"])


@pytest.mark.parametrize("conv", [pytest.param(c, marks=() if c in DEFAULT else
                                               pytest.mark.slow) for c in CONVS])
def test_any_one_conv_kept_passes(data, tmp_path, conv):
    _check_exact(data, tmp_path / "out", [conv])


@pytest.mark.parametrize("pair", [("Conv_115", "Conv_130"), ("Conv_20", "Conv_181")])
def test_two_convs_kept_pass(data, tmp_path, pair):
    _check_exact(data, tmp_path / "out", list(pair))


def test_a_wrong_weight_in_the_divided_conv_fails(data, tmp_path):
    code, _ = _convert(data, tmp_path / "out", ["Conv_115", "Conv_130"])
    assert code == 0
    art = tmp_path / "mnv3"
    shutil.copytree(tmp_path / "out" / "mnv3", art)
    plant_wrong_weight(art, "Conv_130")
    assert verify_main([str(data / "mnv3.onnx"), str(art)]) == 3
