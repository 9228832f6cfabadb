"""An int8 row's agreement with fp32: which figure says something of which output.

- cosine: per output, the lowest over the samples of the cosine between a sample's int8 and
  fp32 values; but an output with one value per sample (a VAD's speech probability, a
  regressor's estimate) has a cosine of +-1 whatever the error, so it is judged by its largest
  error over its peak |fp32| over the samples instead, and named (``wrecked``) when that exceeds
  ``ONE_VALUE_WRECKED``: an error of half the peak is what a vector at the cosine bound 0.9 is
  off by (its sine, 0.44 of its norm), rounded up.
- top-1: only for an output that is a class distribution, one a Softmax or LogSoftmax writes
  (through ops that only move, cast or (de)quantize its values); a regression output's argmax
  (a face detector's box) says nothing, and a classifier's raw logits carry no mark of being
  one, so they get no top-1 either.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Set

import numpy as np
import onnx

import real_corpus_feeds as feeds

WRECKED = 0.9  # an int8 output whose cosine against fp32 is below this is named
ONE_VALUE_WRECKED = 0.5  # one value per sample: named above this error over its peak
_DISTRIBUTIONS = {"Softmax", "LogSoftmax"}
_CARRIERS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Cast",
             "QuantizeLinear", "DequantizeLinear"}


def class_distributions(model: onnx.ModelProto) -> Set[str]:
    """The model's outputs a Softmax or LogSoftmax writes, through ``_CARRIERS``."""
    producer = {out: node for node in model.graph.node for out in node.output}
    found = set()
    for output in model.graph.output:
        node = producer.get(output.name)
        while node is not None and node.op_type in _CARRIERS and node.input:
            node = producer.get(node.input[0])
        if node is not None and node.op_type in _DISTRIBUTIONS:
            found.add(output.name)
    return found


def one_value_outputs(fp32: Mapping[str, Sequence[np.ndarray]]) -> Set[str]:
    """The outputs with one value in every sample."""
    return {name for name, values in fp32.items()
            if values and all(np.size(v) == 1 for v in values)}


def agreement(rows: Sequence[Any], fp32: Mapping[str, Sequence[np.ndarray]],
              model: onnx.ModelProto) -> Dict[str, Any]:
    """``cosine`` (worst over the outputs with more than one value), ``top1`` (worst over the
    class distributions), ``one_value_err`` (worst error over peak of the one-value outputs)
    and ``wrecked`` (outputs named by either bound), from verify's rows against fp32 (each with
    ``tensor``, ``cosine``, ``top1``, ``max_abs``) and fp32's outputs per sample."""
    single, classes = one_value_outputs(fp32), class_distributions(model)
    cos = [(r.tensor, r.cosine) for r in rows if r.cosine is not None and r.tensor not in single]
    errs = [(r.tensor, feeds.over_peak(r.max_abs, feeds.peak(fp32[r.tensor])))
            for r in rows if r.tensor in single and r.max_abs is not None]
    top1 = [r.top1 for r in rows if r.top1 is not None and r.tensor in classes]
    wrecked: List[str] = [name for name, c in cos if not c >= WRECKED]
    wrecked += [name for name, e in errs if not e <= ONE_VALUE_WRECKED]
    return {"cosine": min(c for _, c in cos) if cos else None,
            "top1": min(top1) if top1 else None,
            "one_value_err": max(e for _, e in errs) if errs else None, "wrecked": wrecked}
