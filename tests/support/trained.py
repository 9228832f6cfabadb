"""Data for the classifiers trained in the tests (``tests/tune``): each class a fixed 3x8x8
template, scaled and noised, so the classes are separable and the labels known."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Tuple

import numpy as np


def template_images(count: int, seed: int, classes: int = 3) -> Tuple[np.ndarray, np.ndarray]:
    """(images ``[count, 3, 8, 8]`` float32, labels): the templates are the same every call
    (seed 100), the draw of labels, scales and noise is ``seed``'s."""
    templates = np.random.default_rng(100).standard_normal((classes, 3, 8, 8))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, count)
    x = templates[labels] * rng.uniform(0.7, 1.3, (count, 1, 1, 1)) \
        + 0.3 * rng.standard_normal((count, 3, 8, 8))
    return x.astype(np.float32), labels


def conv_nchw(a: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int) -> np.ndarray:
    """A stride-1 Conv of NCHW ``a`` by ``w`` plus ``b``, zero-padded by ``pad``, in numpy (what
    the tests' classifiers fit their last layer on)."""
    a = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[-1]
    h, v = a.shape[2] - k + 1, a.shape[3] - k + 1
    cols = np.stack([a[:, :, i:i + h, j:j + v] for i in range(k) for j in range(k)], -1)
    return np.einsum("nchwk,ock->nohw", cols, w.reshape(w.shape[0], w.shape[1], -1)) \
        + b[None, :, None, None]


def pooled_fc(x: str, y: str = "y") -> list:
    """GlobalAveragePool, Flatten and the Gemm by ``wf``, ``bf``: a trained classifier's head."""
    from onnx import helper

    return [helper.make_node("GlobalAveragePool", [x], ["p"], name="pool"),
            helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
            helper.make_node("Gemm", ["f", "wf", "bf"], [y], name="fc")]


def saved_classifier(model, tmp: Path, classes: int = 3
                     ) -> Tuple[Path, Dict[str, np.ndarray], np.ndarray, Path]:
    """``model`` saved as ``tmp``/clf.onnx, with 64 images of seed 2 (calibration and held-out
    rows) and their labels: (path, {"x": images}, labels, tmp), a module fixture's value."""
    import onnx

    src = tmp / "clf.onnx"
    onnx.save(model, src)
    x, labels = template_images(64, 2, classes)
    return src, {"x": x}, labels, tmp
