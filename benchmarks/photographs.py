"""Real photographs as model inputs: scikit-image's sample pictures, read from its wheel.

scikit-image ships about two dozen photographs and scans in ``skimage/data/`` inside its wheel;
they are read here straight from the wheel with Pillow (``pip install .[bench]``), without
installing scikit-image. The wheel is fetched once with ``pip download`` into
``~/.cache/mrvl_convert/`` (or given with ``--wheel``/``MRVL_PHOTOS_WHEEL``): benchmarks may
reach PyPI, tests never do.

``samples(count, size, seed)`` gives ``count`` inputs ``[3, size, size]``: random crops (a
quarter to all of the shorter side), random horizontal flips, resized, scaled to [0, 1] and
normalised with ImageNet's mean and standard deviation, as a classifier's preprocessing does.
"""
from __future__ import annotations

import glob
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import List, Optional

import numpy as np

WHEEL_SPEC = "scikit-image==0.26.0"
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def wheel(path: Optional[str] = None) -> Path:
    """The scikit-image wheel: ``path``, ``MRVL_PHOTOS_WHEEL``, the cache, or downloaded."""
    given = path or os.environ.get("MRVL_PHOTOS_WHEEL")
    if given:
        return Path(given)
    cache = Path.home() / ".cache" / "mrvl_convert"
    found = sorted(glob.glob(str(cache / "scikit_image-*.whl")))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", WHEEL_SPEC, "--no-deps",
                        "--only-binary=:all:", "-d", str(cache)], check=True)
        found = sorted(glob.glob(str(cache / "scikit_image-*.whl")))
    return Path(found[-1])


def pictures(wheel_path: Path) -> List[np.ndarray]:
    """Every picture in the wheel's ``skimage/data/``, as RGB uint8 ``[H, W, 3]``, name order."""
    from PIL import Image

    out = []
    with zipfile.ZipFile(wheel_path) as archive:
        for name in sorted(archive.namelist()):
            if name.startswith("skimage/data/") and name.endswith((".png", ".jpg")):
                with Image.open(io.BytesIO(archive.read(name))) as image:
                    out.append(np.asarray(image.convert("RGB")))
    return out


def samples(count: int, size: int, seed: int, wheel_path: Optional[Path] = None) -> np.ndarray:
    """``count`` normalised crops ``[count, 3, size, size]`` float32 (module docstring)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    images = pictures(wheel_path or wheel())
    out = np.empty((count, 3, size, size), np.float32)
    for k in range(count):
        image = images[rng.integers(len(images))]
        h, w = image.shape[:2]
        side = int(min(h, w) * rng.uniform(0.25, 1.0))
        top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = image[top:top + side, left:left + side]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        resized = Image.fromarray(np.ascontiguousarray(crop)).resize((size, size),
                                                                     Image.BILINEAR)
        chw = np.asarray(resized, np.float32).transpose(2, 0, 1) / 255.0
        out[k] = (chw - MEAN) / STD
    return out
