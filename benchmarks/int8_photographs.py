"""int8 on real photographs: what each quantization recipe costs against fp32, per model.

    pip install .[bench]
    python benchmarks/int8_photographs.py [--models mobilenet_v2 ...] [--calibrate 64] [--test 96]

The int8 corpus (``tests/support/corpus_int8.py``: MobileNetV2, MobileNetV3-small, a PRelu
net, a U-Net; seeded weights) is calibrated on ``--calibrate`` crops of scikit-image's
photographs (``benchmarks/photographs.py``) and tested on ``--test`` other crops. For each
recipe (calibration ``minmax``, ``percentile``, ``entropy``; ``minmax`` after cross-layer
weight equalization (``--equalize``) or with bias correction (``--bias-correction``); and ``minmax`` with ``--keep-fp16 auto``, alone and with
``--min-agreement 0.99``, its agreement measured on the calibration crops) it prints, against the fp32 model run by onnxruntime: top-1 agreement
(the U-Net: per pixel; the PRelu net regresses landmarks, so none), the smallest and the mean
cosine of the outputs, and against onnxruntime's run of the QDQ model as written: how many test
inputs differ at all (0: the simulator is exact, any loss is the recipe's). Also the Mrvl and
CPU subgraph counts of the int8 artifact and the layers ``auto`` kept in fp16.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import photographs  # noqa: E402
from support.corpus_int8 import int8_corpus  # noqa: E402  (tests/support/corpus_int8.py)

import mrvl_convert  # noqa: E402
from mrvl_convert.quantize import Quantization  # noqa: E402
from mrvl_convert.tune.keep_fp16 import quantize_keep_fp16  # noqa: E402

MODELS = ("mobilenet_v2", "mobilenet_v3_small", "prelu_net", "unet")
RECIPES = ("minmax", "percentile", "entropy", "minmax + CLE", "minmax + bias correction",
           "keep-fp16 auto", "keep-fp16 auto --min-agreement 0.99")
TARGET = 0.99  # the --min-agreement row's target
# The output axis top-1 is taken over; None: a regression output, no top-1.
TOP1_AXIS: Dict[str, Optional[int]] = {"mobilenet_v2": -1, "mobilenet_v3_small": -1,
                                       "prelu_net": None, "unet": 1}


def ort_session(path: Path, qdq_as_written: bool = False) -> ort.InferenceSession:
    """onnxruntime on the CPU; ``qdq_as_written``: the QDQ model run as written (no fused
    int8 kernels), as the int8 layers are simulated."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if qdq_as_written:
        options.add_session_config_entry("session.disable_quant_qdq", "1")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    g, w = got.reshape(len(got), -1), want.reshape(len(want), -1)
    return (g * w).sum(1) / np.maximum(np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1),
                                       1e-30)


def _agreement(got: np.ndarray, want: np.ndarray, axis: Optional[int]) -> Optional[float]:
    if axis is None:
        return None
    return float((got.argmax(axis) == want.argmax(axis)).mean())


def _run(run_one, inputs: np.ndarray) -> np.ndarray:
    return np.concatenate([run_one(sample[None]) for sample in inputs])


def _artifact_row(name: str, recipe: str, artifact: Path, qdq_file: Path, test: np.ndarray,
                  fp32: np.ndarray, input_name: str, kept: str) -> Dict[str, object]:
    session = mrvl_convert.HybridSession(artifact)
    hybrid = _run(lambda x: session.run(None, {input_name: x})[0], test)
    reference = ort_session(qdq_file, qdq_as_written=True)
    qdq = _run(lambda x: reference.run(None, {input_name: x})[0], test)
    kinds = [s["kind"] for s in _stages(artifact)]
    cos = _cosines(hybrid, fp32)
    return {"model": name, "recipe": recipe, "mrvl": kinds.count("mrvl"),
            "cpu": kinds.count("cpu"), "top1": _agreement(hybrid, fp32, TOP1_AXIS[name]),
            "qdq_top1": _agreement(qdq, fp32, TOP1_AXIS[name]),
            "cos_min": float(cos.min()), "cos_mean": float(cos.mean()),
            "differ_from_qdq": int(sum(not np.array_equal(a, b) for a, b in zip(hybrid, qdq))),
            "kept": kept}


def _manifest(artifact: Path) -> dict:
    return json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))


def _stages(artifact: Path) -> List[dict]:
    return _manifest(artifact)["stages"]


def measure(name: str, calibrate: int, test_count: int, tmp: Path) -> List[Dict[str, object]]:
    model: onnx.ModelProto = int8_corpus(name)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    input_name = model.graph.input[0].name
    calib = photographs.samples(calibrate, shape[-1], seed=1)
    test = photographs.samples(test_count, shape[-1], seed=2)
    model_path = tmp / f"{name}.onnx"
    onnx.save(model, str(model_path))
    fp32_session = ort_session(model_path)
    fp32 = _run(lambda x: fp32_session.run(None, {input_name: x})[0], test)
    rows = []
    for recipe in RECIPES:
        artifact = tmp / f"{name}_{recipe.replace(' ', '_')}"
        kept: List[str] = []
        note = ""
        if recipe.startswith("keep-fp16 auto"):
            qdq = tmp / f"{name}.keep.onnx"
            target = TARGET if "--min-agreement" in recipe else None
            if target is not None and TOP1_AXIS[name] != -1:
                continue  # --min-agreement takes top-1 over the last axis: none to reach here
            # Layers are chosen (and a target judged, on a held-out half) on the calibration
            # crops, never on the crops the row is tested on.
            feeds = None if target is not None else [{input_name: s[None]} for s in calib]
            result = quantize_keep_fp16(model_path, qdq, {input_name: calib}, "auto",
                                        inputs=feeds, min_agreement=target)
            kept = result.kept
            note = "" if target is None else (
                f" (stages {result.stages_before.get('mrvl', 0)}/"
                f"{result.stages_before.get('cpu', 0)} -> {result.stages_after.get('mrvl', 0)}/"
                f"{result.stages_after.get('cpu', 0)}; {_fmt(result.held_out)} on "
                f"{result.held_out_samples} held-out calibration crops, "
                f"{'reached' if result.reached else 'NOT reached'})")
            mrvl_convert.convert(onnx.load(str(qdq)), artifact, name=name)
        else:
            method, _, extra = recipe.partition(" + ")
            mrvl_convert.convert(model, artifact, name=name, quantize=Quantization(
                {input_name: calib}, method, equalize=extra == "CLE",
                bias_correction=extra == "bias correction"))
            qdq = artifact / _manifest(artifact)["quantization"]["file"]
        rows.append(_artifact_row(name, recipe, artifact, qdq, test, fp32, input_name,
                                  f"{len(kept)}{note}"))
    return rows


def _fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(rows: List[Dict[str, object]]) -> str:
    lines = ["| model | recipe | Mrvl / CPU subgraphs | top-1 vs fp32 (QDQ run) | cosine min "
             "/ mean | inputs differing from the QDQ run | layers kept fp16 |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        top1 = "-" if r["top1"] is None else f"{_fmt(r['top1'])} ({_fmt(r['qdq_top1'])})"
        lines.append(f"| {r['model']} | {r['recipe']} | {r['mrvl']} / {r['cpu']} | {top1} | "
                     f"{r['cos_min']:.3f} / {r['cos_mean']:.3f} | {r['differ_from_qdq']} | "
                     f"{r['kept']} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--calibrate", type=int, default=64)
    parser.add_argument("--test", type=int, default=96)
    args = parser.parse_args(argv)
    rows: List[Dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            new = measure(name, args.calibrate, args.test, Path(tmp))
            rows += new
            print(table(new), flush=True)
    print(f"\n{args.calibrate} calibration crops, {args.test} test crops "
          f"(onnxruntime {ort.__version__})\n")
    print(table(rows))


if __name__ == "__main__":
    main()
