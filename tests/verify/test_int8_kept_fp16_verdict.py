"""int8 with layers the user keeps in fp16 (issue 40, finding 4): the verdict is taken against
the QDQ model with those layers rounded to fp16 where the artifact rounds them
(``verify/kept_fp16.py``), so a correct conversion passes (it exited 3: the kept layers were
judged against the QDQ model's float32 ops), and a wrong weight in a kept layer still fails."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from mrvl_convert.cli.convert import main as convert_main
from mrvl_convert.cli.verify import main as verify_main
from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.kept_fp16 import rounded_as_artifact
from mrvl_convert.verify.reference import reference_session, sample_feeds
from support.corpus_int8 import int8_corpus
from support.planted import plant_wrong_weight

KEPT = ["Conv_24", "HardSigmoid_25"]  # MobileNetV3-small's first squeeze-excite gate


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kept_fp16")
    onnx.save(int8_corpus("mobilenet_v3_small"), str(tmp / "mnv3.onnx"))
    rng = np.random.default_rng(0)
    np.savez(tmp / "cal.npz", x=rng.uniform(-1, 1, (16, 3, 64, 64)).astype(np.float32))
    keep = [a for node in KEPT for a in ("--keep-fp16", node)]
    code = convert_main([str(tmp / "mnv3.onnx"), "-o", str(tmp / "out"), "-q", "--quantize",
                         "int8", "--calibration", str(tmp / "cal.npz"), *keep, "--verify"])
    return tmp, code


def test_a_correct_conversion_with_kept_layers_passes(converted):
    tmp, code = converted
    assert code == 0
    row = json.loads((tmp / "out" / "summary.json").read_text())["models"][0]
    assert row["verified"] is True and "rounded to fp16" in row["verify"]["reference"]


@pytest.mark.parametrize("criterion", ["ours", "marvell"])
def test_mrvl_verify_passes_it_too(converted, criterion, capsys):
    tmp, _ = converted
    art = tmp / "out" / "mnv3"
    assert verify_main([str(tmp / "mnv3.onnx"), str(art), "--criterion", criterion]) == 0


def test_the_kept_conv_is_the_artifacts_bit_for_bit(converted):
    """The kept Conv reads the dequantized int8 values as the artifact's dequantizing quant
    layer hands them on, in float32 (an exact layer: not rounded): the reference's rounded
    Conv result equals the artifact's layer value on every sample. Rounding that input too
    (as before) made it one fp16 step off on some, which one int8 step after the HardSigmoid
    turned into a FAIL with the calibration onnxruntime 1.18's quantize_static gives."""
    tmp, _ = converted
    art = tmp / "out" / "mnv3"
    session = HybridSession(art)
    proto = onnx.load(str(art / "mnv3.int8.onnx"))
    assert rounded_as_artifact(proto, session) == KEPT
    reference = reference_session(proto, [TensorSpec("Conv_24_out", (), "float32")])
    for feed in sample_feeds(session, None, 0, 8):
        _, trace = session.run_layers(feed)
        layer = next(t.value for t in trace if list(t.spec.source_nodes) == ["Conv_24"])
        want = reference.run(["Conv_24_out"], feed)[0]
        np.testing.assert_array_equal(layer.transpose(0, 3, 1, 2), want)


@pytest.mark.parametrize("criterion", ["ours", "marvell"])
def test_a_wrong_weight_in_a_kept_layer_fails(converted, tmp_path, criterion, capsys):
    tmp, _ = converted
    art = tmp_path / "mnv3"
    shutil.copytree(tmp / "out" / "mnv3", art)
    plant_wrong_weight(art, "Conv_24")
    assert verify_main([str(tmp / "mnv3.onnx"), str(art), "--criterion", criterion]) == 3
    assert "FAIL" in capsys.readouterr().out
