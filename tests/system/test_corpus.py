"""Real topologies stay whole on the accelerator (issue 16), on the partition corpus.

The canonical forms (ResNet-50's Sum, the Paddle-style model) and, with the newer layer set,
the MobileNets (Relu6 as Clip, hard-swish, squeeze-excite). Stage-count targets and upstream TVM 0.19's counts are from the issue.
"""
from __future__ import annotations

import numpy as np
import pytest

import mrvl_convert
from mrvl_convert.runtime import HybridSession
from mrvl_convert.verify.tolerances import DEFAULT_TOLERANCE
from support import corpus
from support.models import Builder, run_ort

pytestmark = pytest.mark.system


def _convert_and_run(model, tmp_path, shapes=None):
    result = mrvl_convert.convert(model, tmp_path / "art", shapes=shapes)
    feed = corpus.feeds(model, shapes)
    [got] = HybridSession(result.out_dir, threads=1).run(None, feed)
    [want] = run_ort(model, feed).values()
    rel = float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-30)
    assert rel <= DEFAULT_TOLERANCE.max_rel, rel
    assert np.array_equal(got.reshape(len(got), -1).argmax(-1),
                          want.reshape(len(want), -1).argmax(-1))
    return result


def test_sum_residual_blocks_are_one_mrvl_subgraph(tmp_path):
    """Residual blocks adding with the old n-ary `Sum` (+ Relu), as the legacy ResNet export."""
    b = Builder()
    y = b.op("Relu", [b.conv(_one(b, [1, 3, 8, 8]), 3, 8, pads=[1, 1, 1, 1])])
    for _ in range(3):
        h = b.op("Relu", [b.conv(y, 8, 8, pads=[1, 1, 1, 1])])
        y = b.op("Relu", [b.op("Sum", [y, b.conv(h, 8, 8, pads=[1, 1, 1, 1])])])
    result = _convert_and_run(b.model([y]), tmp_path)
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_nodes"] == 0
    assert result.summary["transitions"] == 0


def test_resnet50_legacy_export_is_one_mrvl_subgraph(tmp_path):
    """The legacy zoo ResNet-50 adds with `Sum`: once canonical, one region (upstream: 1)."""
    result = _convert_and_run(corpus.zoo("resnet50"), tmp_path)
    assert result.summary["mrvl_subgraphs"] == 1
    assert result.summary["transitions"] == 0          # the final Softmax is a layer too
    assert result.report["cut_by"] == []


def test_paddle_style_model_converts_with_its_minus_one_batch(tmp_path):
    model = corpus.paddle_cnn()
    with pytest.raises(mrvl_convert.ShapeError, match="-1"):
        mrvl_convert.convert(model, tmp_path / "refused")
    result = _convert_and_run(model, tmp_path, corpus.PADDLE_SHAPES)
    assert result.manifest["model"]["outputs"][0]["shape"] == [1, 10]
    # Sub -> Add and Div by 0.5 -> Mul are canonical; Div by 0.229 and by 6 stay, with why.
    kept = [e for e in result.placements if e["op_type"] == "Div" and "not exact" in
            e.get("canonical", "")]
    assert len(kept) == 2


@pytest.mark.parametrize("name,target", [("densenet121", 2), ("inception_v2", 2),
                                         ("shufflenet", 4)])
def test_zoo_targets_of_issue_16(tmp_path, name, target):
    result = _convert_and_run(corpus.zoo(name), tmp_path)
    assert result.summary["mrvl_subgraphs"] <= target


def _one(b: Builder, shape):
    return b.input("x", shape)


def test_standalone_batchnorm_runs_on_mrvl(tmp_path):
    """Pre-activation BN -> Relu -> Conv (DenseNet): the BN (with the Relu fused) on Mrvl, and
    the whole model one region."""
    b = Builder()
    x = b.op("Relu", [b.conv(_one(b, [1, 3, 8, 8]), 3, 8, pads=[1, 1, 1, 1])])
    y = b.op("Relu", [b.bn(x, 8)], name="pre_relu")  # after a Relu: nothing to fold into
    y = b.conv(y, 8, 8, k=1)
    result = _convert_and_run(b.model([y]), tmp_path)
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_nodes"] == 0


@pytest.mark.parametrize("shape", [[1, 8, 1, 1], [8, 1, 1]])
def test_per_channel_mul_add_runs_on_mrvl(tmp_path, shape):
    """Inception-v2's BN folded at export leaves Conv -> Mul -> Add -> Relu."""
    b = Builder()
    x = b.conv(_one(b, [1, 3, 8, 8]), 3, 8, pads=[1, 1, 1, 1])
    rng = np.random.default_rng(1)
    y = b.op("Mul", [x, b.const((1 + 0.1 * rng.standard_normal(shape)).astype(np.float32))])
    y = b.op("Add", [y, b.const((0.1 * rng.standard_normal(shape)).astype(np.float32))])
    y = b.conv(b.op("Relu", [y]), 8, 8, k=1)
    result = _convert_and_run(b.model([y]), tmp_path)
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_nodes"] == 0


@pytest.mark.parametrize("groups", [2, 4])
def test_grouped_conv_runs_on_mrvl(tmp_path, groups):
    b = Builder()
    y = b.conv(_one(b, [1, 8, 8, 8]), 8, 16, k=3, pads=[1, 1, 1, 1], group=groups)
    result = _convert_and_run(b.model([b.op("Relu", [y])]), tmp_path)
    assert result.summary["mrvl_subgraphs"] == 1 and result.summary["cpu_nodes"] == 0


def test_shufflenet_unit_is_few_regions(tmp_path):
    result = _convert_and_run(corpus.shufflenet_unit(), tmp_path)
    assert result.summary["mrvl_subgraphs"] == 1


@pytest.mark.parametrize("name", ["mobilenet_v2", "mobilenet_v3_small"])
def test_mobilenets_stay_on_mrvl_with_the_newer_layer_set(tmp_path, name):
    """Relu6 as Clip (V2); hard-swish both ways, squeeze-excite Mul, HardSigmoid (V3): Clip,
    Mul2D and Sum2D layers of layer set marvell (issue 17: at most 2 Mrvl subgraphs)."""
    result = _convert_and_run(corpus.built(name), tmp_path)
    assert result.summary["mrvl_subgraphs"] <= 2
    assert result.summary["cpu_nodes"] == 0
