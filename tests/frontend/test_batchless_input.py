"""A batchless model input (issue 45, madmom's music nets): ``[frames, bins]`` that every reader
first lifts to ``[1, ...]`` (Unsqueeze of axis 0) is one sample, so the model's batch is 1 and
the ``[frames, bins, C]`` tensors between its NHWC-wrapped Convs are not batches of ``frames``
(``rules/batch_axis.py``). On integ every Mul/Add/Elu/Pad between the wrappers stayed on the
CPU ("batch 16 is larger than the accelerator's maximum of 8", "the batch dimension is not
kept"). A model whose input batch really is 12 runs as batches the device takes."""
from __future__ import annotations

import numpy as np

import mrvl_convert
from mrvl_convert.rules.batch_axis import axis0_is_batch
from mrvl_convert.rules.checks_shape import model_batch
from support.models import Builder, canonicalized, run_ort

import onnx_graphsurgeon as gs
import onnx


def _axes(b: Builder, *axes: int) -> str:
    return b.const(np.array(axes, np.int64))


def _wrapped_conv(b: Builder, x: str, cin: int, cout: int, k: int, tag: str, **attrs) -> str:
    """madmom's Conv wrapper: [H, W, C] -> [1, H, W, C] -> NCHW -> Conv -> NHWC -> [H', W', C']."""
    y = b.op("Unsqueeze", [x, _axes(b, 0)], name=f"{tag}_add_batch")
    y = b.op("Transpose", [y], name=f"{tag}_to_nchw", perm=[0, 3, 1, 2])
    bias = b.const((b.rng.standard_normal(cout) * 0.1).astype(np.float32))
    y = b.op("Conv", [y, b.weight(cout, cin, k, k), bias], name=tag, kernel_shape=[k, k], **attrs)
    y = b.op("Transpose", [y], name=f"{tag}_to_nhwc", perm=[0, 2, 3, 1])
    return b.op("Squeeze", [y, _axes(b, 0)], name=f"{tag}_remove_batch")


def madmom_net(frames: int = 16, bins: int = 12):
    b = Builder(seed=45, opset=13)
    x = b.input("x", [frames, bins])
    y = b.op("Unsqueeze", [x, _axes(b, 2)], name="expand_channel")  # [T, F, 1]
    y = _wrapped_conv(b, y, 1, 8, 3, "conv1", pads=[1, 1, 1, 1])  # [T, F, 8]
    y = b.op("Mul", [y, b.const(np.linspace(0.5, 1.5, 8, dtype=np.float32))], name="bn_scale")
    y = b.op("Add", [y, b.const(np.linspace(-0.2, 0.2, 8, dtype=np.float32))], name="bn_shift")
    y = b.op("Elu", [y], name="elu", alpha=1.0)
    y = b.op("Pad", [y, b.const(np.array([1, 0, 0, 1, 0, 0], np.int64))], name="pad_time")
    return b.model([_wrapped_conv(b, y, 8, 8, 3, "conv2")])  # [T, F - 2, 8]


def batched_net(batch: int = 12):
    b = Builder(seed=46, opset=13)
    y = b.op("Conv", [b.input("x", [batch, 3, 8, 8]), b.weight(8, 3, 3, 3)], name="conv",
             kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    return b.model([b.op("Relu", [y], name="relu")])


def unsqueezed_batch_net(batch: int = 12):
    """A batch of 1-D signals made 4-D by Unsqueeze(2): axis 0 stays axis 0, a batch."""
    b = Builder(seed=47, opset=13)
    y = b.op("Unsqueeze", [b.input("x", [batch, 3, 16]), _axes(b, 2)], name="to_image")
    return b.model([b.op("Conv", [y, b.weight(4, 3, 1, 3)], name="conv", kernel_shape=[1, 3])])


def test_an_input_lifted_before_it_is_read_is_one_sample():
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(madmom_net()))
    assert not axis0_is_batch(graph, graph.inputs[0]) and model_batch(graph) == 1
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(batched_net()))
    assert axis0_is_batch(graph, graph.inputs[0]) and model_batch(graph) == 12
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(unsqueezed_batch_net()))
    assert axis0_is_batch(graph, graph.inputs[0]) and model_batch(graph) == 12


def test_a_batchless_music_net_is_one_mrvl_subgraph_and_verifies(tmp_path):
    model = madmom_net()
    result = mrvl_convert.convert(model, tmp_path / "art")
    summary = result.report["summary"]
    cpu = [(e["name"], e.get("reason")) for e in result.report["nodes"]
           if e["placement"] != "mrvl"]
    assert summary["mrvl_subgraphs"] == 1 and summary["mrvl_mac_share"] >= 0.9, (summary, cpu)
    assert mrvl_convert.compare(model, tmp_path / "art", samples=2).passed


def test_a_real_batch_of_12_runs_in_chunks_of_the_device_batch(tmp_path):
    # The batch is the input's 12, above the device's: the per-sample region runs as 12 runs of
    # 1, the built-in profile's max_batch (rules/batch_axis.py batch_runs), where before it was
    # refused.
    result = mrvl_convert.convert(batched_net(), tmp_path / "art")
    (stage,) = result.manifest["stages"]
    assert stage["runs"] == 12 and stage["inputs"][0]["shape"] == [12, 3, 8, 8]


def test_the_lifted_graph_computes_what_the_model_does_bit_for_bit():
    model = madmom_net()
    canonical, proto = canonicalized(model)
    assert any("batchless" in why for why in canonical.rewritten.values())
    assert all(len(t.shape) == 4 for n in canonical.graph.nodes
               if n.op in ("Mul", "Add", "Elu", "Pad") for t in n.outputs)
    for seed in range(3):
        feeds = {"x": np.random.default_rng(seed).standard_normal((16, 12)).astype(np.float32)}
        want, got = run_ort(model, feeds, optimize=False), run_ort(proto, feeds, optimize=False)
        for name, value in want.items():
            assert got[name].shape == value.shape and np.array_equal(got[name], value), name
