"""Batchless audio nets whose frame axis 0 the graph mixes (issue 45, madmom's onsets_cnn and
beats_tcn_1): a ``[frames, bins]`` input made ``[T, W, C]`` by one madmom-wrapped Conv
(``Unsqueeze(0) -> Transpose -> Conv -> Transpose -> Squeeze(0)``), then on the batchless
frames a draw of

- sliding windows: K Slices along axis 0 at offsets o, o + d, ... (madmom's negative ends),
  each Unsqueezed at a (1 or 2) and joined by a Concat along a, flattened, read by an FC;
- per-frame ops on ``[T, C]``: Elu, a Mul by a per-channel constant, an FC with a bias, a
  residual Add;
- a head: a Sigmoid FC per frame (``[T]``) and, drawn, a mean over the frames (ReduceMean
  over axis 0) into an FC and a Softmax;
- drawn, a Pad of the input (frames and bins, before the Conv) and a mean over the frames and
  the bins of the Conv's ``[T, W, C]`` (madmom's key net).

``sequence_from_spec(spec)`` builds the model and its feeds from a flat spec alone (a
falsifying example prints as that call); ``sequence_models()`` draws one.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import strategies as st

import mrvl_convert
from support.models import Builder
from support.strategies.generated import GeneratedModel

PER_FRAME = ("elu", "scale", "fc", "residual")


class SequenceModel(GeneratedModel):
    rebuilt_by = "sequence_from_spec"


def _i64(b: Builder, *values: int) -> str:
    return b.const(np.array(values, np.int64))


def _wrapped_conv(b: Builder, x: str, cin: int, cout: int, kernel: list) -> str:
    """madmom's Conv: [T, W, C] -> [1, T, W, C] -> NCHW -> Conv -> NHWC -> [T', W', C']."""
    y = b.op("Transpose", [b.op("Unsqueeze", [x, _i64(b, 0)], name="conv_add_batch")],
             name="conv_to_nchw", perm=[0, 3, 1, 2])
    y = b.op("Conv", [y, b.weight(cout, cin, *kernel)], name="conv", kernel_shape=kernel)
    y = b.op("Transpose", [y], name="conv_to_nhwc", perm=[0, 2, 3, 1])
    return b.op("Squeeze", [y, _i64(b, 0)], name="conv_remove_batch")


def _windows(b: Builder, y: str, frames: int, width: int, channels: int, spec: dict) -> str:
    """K windows of frames stacked at ``axis``, flattened, into an FC: [T', channels]."""
    k, d, axis = spec["windows"], spec["dilation"], spec["stack_axis"]
    span = (k - 1) * d
    length = frames - span
    pieces = []
    for i in range(k):
        end = i * d - span if i * d < span else 1 << 62  # madmom: -6 .. -1, then to the end
        piece = b.op("Slice", [y, _i64(b, i * d), _i64(b, end), _i64(b, 0)], name=f"win{i}")
        pieces.append(b.op("Unsqueeze", [piece, _i64(b, axis)], name=f"win{i}_stack"))
    y = b.op("Concat", pieces, name="windows", axis=axis)
    y = b.op("Reshape", [y, _i64(b, length, -1)], name="windows_flat")
    y = b.op("MatMul", [y, b.weight(k * width * channels, channels)], name="window_fc")
    return b.op("Add", [y, b.const(np.full(channels, 0.05, np.float32))], name="window_bias")


def _per_frame(b: Builder, y: str, op: str, channels: int, i: int) -> str:
    if op == "elu":
        return b.op("Elu", [y], name=f"elu{i}", alpha=1.0)
    if op == "scale":
        values = np.linspace(0.6, 1.4, channels, dtype=np.float32)
        return b.op("Mul", [y, b.const(values)], name=f"scale{i}")
    if op == "fc":
        y = b.op("MatMul", [y, b.weight(channels, channels)], name=f"fc{i}")
        return b.op("Add", [y, b.const(np.full(channels, 0.1, np.float32))], name=f"fc{i}_bias")
    return b.op("Add", [y, b.op("Elu", [y], name=f"res{i}_branch")], name=f"res{i}")


def sequence_from_spec(spec: dict) -> SequenceModel:
    b = Builder(seed=spec["seed"], opset=13)
    frames, bins, channels = spec["frames"], spec["bins"], spec["channels"]
    y = b.input("x", [frames, bins])
    if spec.get("pad"):  # madmom's key net pads its input, a frame and a bin each side
        y = b.op("Pad", [y, _i64(b, 1, 1, 1, 1)], name="pad_input")
        frames, bins = frames + 2, bins + 2
    y = b.op("Unsqueeze", [y, _i64(b, 2)], name="expand_channel")
    width = 1 if spec["windows"] else 2  # a Conv over the bins leaves W = 1 (or 2)
    y = _wrapped_conv(b, y, 1, channels, [3, bins + 1 - width])  # [T - 2, width, channels]
    frames -= 2
    extra = []
    if spec.get("global_mean"):  # a mean over the frames and the bins (the key net's head)
        extra.append(b.op("ReduceMean", [b.op("Elu", [y], name="key_elu")], name="key_mean",
                          axes=[0, 1], keepdims=0))
    if spec["windows"]:
        y = _windows(b, y, frames, width, channels, spec)
    else:
        y = b.op("Reshape", [y, _i64(b, frames, width * channels)], name="to_frames")
        channels *= width
    for i, op in enumerate(spec["per_frame"]):
        y = _per_frame(b, y, op, channels, i)
    out = b.op("Sigmoid", [b.op("MatMul", [y, b.weight(channels, 1)], name="head")],
               name="head_act")
    outputs = [b.op("Squeeze", [out, _i64(b, 1)], name="activations")]
    if spec["mean"]:
        mean = b.op("ReduceMean", [y], name="mean_frames", axes=[0], keepdims=0)
        logits = b.op("MatMul", [b.op("Unsqueeze", [mean, _i64(b, 0)], name="mean_row"),
                                 b.weight(channels, 5)], name="tempo")
        outputs.append(b.op("Softmax", [logits], name="tempo_softmax", axis=-1))
    feeds = {"x": np.random.default_rng(spec["seed"]).standard_normal(
        (spec["frames"], spec["bins"])).astype(np.float32)}
    return SequenceModel(model=b.model(outputs + extra), feeds=feeds, description=str(spec), spec=spec)


@st.composite
def sequence_models(draw) -> SequenceModel:
    windows = draw(st.sampled_from([0, 2, 3, 7]))
    spec = {"seed": draw(st.integers(0, 2**16)), "frames": draw(st.integers(16, 48)),
            "bins": draw(st.integers(3, 10)), "channels": draw(st.sampled_from([4, 8])),
            "windows": windows, "dilation": draw(st.integers(1, 2)),
            "stack_axis": draw(st.sampled_from([1, 2])),
            "per_frame": draw(st.lists(st.sampled_from(PER_FRAME), min_size=0, max_size=4)),
            "mean": draw(st.booleans()), "pad": draw(st.booleans()),
            "global_mean": draw(st.booleans())}
    return sequence_from_spec(spec)


def assert_whole_and_verified(model, out: Path, samples: int = 2) -> None:
    """The model converts to one Mrvl subgraph, no node of the model on CPU, >= 90% of its MACs
    on the accelerator, and every output passes verify or is within 3x its fp16 floor (what
    rounding every tensor to fp16 costs: a drawn net of stacked FCs can be that sensitive
    itself). A CPU stage may only lift a batchless input to ``[1, T, ...]`` (a view) for the
    Mrvl subgraph to read at batch 1 (``rules/batch_axis.batchless_lifts``): it fits."""
    result = mrvl_convert.convert(model, out)
    summary = result.report["summary"]
    cpu = [(e["name"], e.get("reason")) for e in result.report["nodes"]
           if e["placement"] == "cpu"]
    assert summary["mrvl_subgraphs"] == 1 and summary["cpu_nodes"] == 0, (summary, cpu)
    given = {t["name"] for t in result.manifest["model"]["inputs"]}
    assert all(t["tensor"] in given for s in result.manifest["stages"] if s["kind"] == "cpu"
               for t in s["inputs"]), result.manifest["stages"]
    assert result.report["device"]["fits"] is True, result.report["device"]["reasons"]
    assert summary["mrvl_mac_share"] >= 0.9, summary
    comparison = mrvl_convert.compare(model, out, samples=samples)
    assert comparison.passed or all(
        row.passed or row.floor_max_rel is not None and row.max_rel <= 3 * row.floor_max_rel
        for row in comparison.rows if row.kind == "output"), comparison
