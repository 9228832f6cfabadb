"""Inputs for the real-model corpus, and how its errors are measured.

Inputs by the kind of data a model takes (``real_corpus.yaml``'s ``data``):

- ``image``: crops of scikit-image's photographs (``photographs.py``), scaled to [0, 1] (0..255
  for an integer input), grey where the model takes one channel, NHWC where the input's last
  dim is its channels (1 or 3) and its second is not;
- ``audio``: a second-order mix of sines, a chirp and noise at 16 kHz, peak 0.5 (along the
  last axis, or the one before a trailing axis of 1);
- ``signal``: per channel a few slow sines plus noise (EEG-like), unit scale;
- ``features``: standard normal (spectrogram or embedding frames);
- ``text-ids``: integers below the vocabulary (``vocab``; else per input the smallest table its
  ids index directly, ``mrvl_convert.frontend.vocabulary``; failing both, the smallest table the
  model gathers from), in the input's dtype (float for a Keras model fed ids as floats), drawn
  as verify's default feeds draw ids (``mrvl_convert.frontend.vocabulary.draw_ids``).

The fp16 floor (every float tensor rounded to fp16, on onnxruntime) is the library's
``mrvl_convert.verify.fp16_floor.floor_model``; its figure, as the artifact's error, is the
largest absolute error over the largest |fp32 output|, per output, the worst output's
(``relative_to_peak``).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mrvl_convert.frontend.vocabulary import draw_ids, id_vocabularies
from mrvl_convert.verify.output_kinds import error_over_peak
from mrvl_convert.frontend.vocabulary import vocabulary as id_vocabulary

Feed = Dict[str, np.ndarray]
RATE = 16000


def _np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def vocabulary(model: onnx.ModelProto) -> int:
    """The smallest table an input's ids index directly (not one read by computed
    indices, as T5's 32-entry position-bias table); failing that the smallest first dim of an
    initializer a Gather reads as its table (>= 2), else 256."""
    direct = id_vocabulary(model)
    if direct is not None:
        return direct
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    sizes = [inits[n.input[0]][0] for n in model.graph.node
             if n.op_type == "Gather" and n.input[0] in inits and len(inits[n.input[0]]) == 2]
    sizes = [s for s in sizes if s >= 2]
    return min(sizes) if sizes else 256


def _image(shape: Sequence[int], dtype: np.dtype, rng: np.random.Generator,
           pictures: List[np.ndarray]) -> np.ndarray:
    from PIL import Image

    nhwc = shape[-1] in (1, 3) and shape[1] not in (1, 3)
    n, c, h, w = ((shape[0], shape[3], shape[1], shape[2]) if nhwc else tuple(shape))
    out = np.empty((n, h, w, c), np.float32)
    for k in range(n):
        picture = pictures[rng.integers(len(pictures))]
        ph, pw = picture.shape[:2]
        scale = rng.uniform(0.4, 1.0)
        ch, cw = max(8, int(ph * scale)), max(8, int(pw * scale))
        top, left = rng.integers(0, ph - ch + 1), rng.integers(0, pw - cw + 1)
        crop = Image.fromarray(picture[top:top + ch, left:left + cw]).resize((w, h),
                                                                            Image.BILINEAR)
        rgb = np.asarray(crop, np.float32)
        out[k] = rgb.mean(-1, keepdims=True) if c == 1 else rgb[..., :c]
    if not np.issubdtype(dtype, np.integer):
        out /= 255.0
    return (out if nhwc else out.transpose(0, 3, 1, 2)).astype(dtype)


def _audio(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    if len(shape) >= 2 and shape[-1] == 1 and shape[-2] > 1:
        # a Keras model's [batch, samples, 1] (basic-pitch): the samples run along axis -2
        return _audio(list(shape[:-1]), rng).reshape(shape)
    length = shape[-1]
    t = np.arange(length) / RATE
    rows = []
    for _ in range(int(np.prod(shape[:-1]))):
        tones = sum(rng.uniform(0.2, 1.0) * np.sin(2 * np.pi * rng.uniform(80, 4000) * t
                                                   + rng.uniform(0, 6.3)) for _ in range(3))
        f0, f1 = rng.uniform(100, 500), rng.uniform(1000, 6000)
        chirp = np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t ** 2 / (2 * max(t[-1], 1e-3))))
        x = tones + chirp + 0.3 * rng.standard_normal(length)
        rows.append(0.5 * x / np.abs(x).max())
    return np.asarray(rows).reshape(shape)


def _signal(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    t = np.arange(shape[-1]) / 256.0
    lead = np.prod(shape[:-1])
    freq = rng.uniform(1, 30, (lead, 3, 1))
    phase = rng.uniform(0, 6.3, (lead, 3, 1))
    x = np.sin(2 * np.pi * freq * t + phase).sum(1) + 0.5 * rng.standard_normal((lead, len(t)))
    return x.reshape(shape)


def make_feed(kind: str, specs: Mapping[str, tuple], rng: np.random.Generator,
              pictures: Optional[List[np.ndarray]], vocab: int,
              values: Mapping[str, np.ndarray],
              vocabs: Optional[Mapping[str, int]] = None) -> Feed:
    """One feed: every input of ``specs`` (name -> (shape, elem_type)) drawn as ``kind`` says;
    an input named in ``values`` takes that value; integer inputs of a non-text model draw ids
    too (e.g. lengths or ids beside the main input); ids below ``vocabs[name]`` where it names
    the input, else below ``vocab``."""
    feed: Feed = {}
    for name, (shape, elem) in specs.items():
        dtype = _np_dtype(elem)
        if name in values:
            feed[name] = np.asarray(values[name], dtype)
        elif kind == "image" and len(shape) == 4 and pictures:
            feed[name] = _image(shape, dtype, rng, pictures)
        elif kind == "text-ids" or np.issubdtype(dtype, np.integer):
            feed[name] = draw_ids(shape, dtype, (vocabs or {}).get(name, vocab), rng)
        elif kind == "audio":
            feed[name] = _audio(shape, rng).astype(dtype)
        elif kind == "signal":
            feed[name] = _signal(shape, rng).astype(dtype)
        else:
            feed[name] = rng.standard_normal(shape).astype(dtype)
    return feed


def over_peak(err: float, peak: float) -> float:
    """``err / peak``; 0 when nothing differs, inf when the reference is all zeros."""
    if err == 0.0:
        return 0.0
    return err / peak if peak > 0 else float("inf")


def peak(values: Sequence[np.ndarray]) -> float:
    """The largest |value| of one output over all samples (NaN if any value is NaN)."""
    return max((float(np.max(np.abs(np.asarray(v, np.float64)))) if np.size(v) else 0.0
                for v in values), default=0.0)


def relative_to_peak(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """max |got - want| over max |want| (all samples of one output): verify's rule."""
    return error_over_peak(got, want)


def stores_fp16(model: onnx.ModelProto) -> bool:
    """Whether the model keeps float16 weights (initializers or Constant nodes)."""
    return any(t.data_type == TensorProto.FLOAT16 for t in model.graph.initializer) or any(
        a.t.data_type == TensorProto.FLOAT16 for n in model.graph.node
        if n.op_type == "Constant" for a in n.attribute if a.name == "value")


def float32_twin(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with float16 made float32 everywhere: weights (exactly: fp16 values are
    float32 values), Cast targets, Constant values, input/output/value_info types. What an
    fp16-stored model would be had it been exported in float32."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    graph = twin.graph
    for i, tensor in enumerate(graph.initializer):
        if tensor.data_type == TensorProto.FLOAT16:
            graph.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(tensor).astype(np.float32), tensor.name))
    for node in graph.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT16:
                attr.i = TensorProto.FLOAT
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == TensorProto.FLOAT16:
                attr.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(attr.t).astype(np.float32), attr.t.name))
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.type.tensor_type.elem_type == TensorProto.FLOAT16:
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    return twin
