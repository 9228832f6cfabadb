"""Data for the classifiers trained in the tests (``tests/tune``): each class a fixed 3x8x8
template, scaled and noised, so the classes are separable and the labels known."""
from __future__ import annotations

from typing import Tuple

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
