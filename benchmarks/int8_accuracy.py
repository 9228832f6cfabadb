"""Accuracy of the example MNIST CNN in fp32, as the fp16 hybrid and as the int8 hybrid, side by side.

    python benchmarks/int8_accuracy.py [--calibration-images 64] [--method minmax]

The example (examples/mnist_cnn) ships one data file, its 500 held-out MNIST test images; the
int8 model is quantized with Marvell's recipe (``mrvl-convert --quantize int8``) calibrated on
the first N of them, so the table also gives the figures on the images the calibration did not
see. Each model runs every image: fp32 on onnxruntime, the fp16 and int8 artifacts on
HybridSession (the whole network on the simulator), and the QDQ model itself on onnxruntime.
Prints a Markdown table for README.md and docs/BENCHMARKS.md. Not a test
(tests/system/test_quantize_accuracy.py asserts the agreement).
"""
from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import onnxruntime as ort

import mrvl_convert
from mrvl_convert.quantize.recipe import Quantization

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mnist_cnn"
Predict = Callable[[np.ndarray], int]


def _session(path: Path) -> Predict:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda image: int(session.run(None, {"input": image[None]})[0].argmax())


def _hybrid(artifact: Path) -> Predict:
    session = mrvl_convert.HybridSession(artifact)
    return lambda image: int(session.run(None, {"input": image[None]})[0].argmax())


def predictions(calibration_images: int, method: str, tmp: Path) -> Dict[str, np.ndarray]:
    """Top-1 class of every held-out image under each way of running the example."""
    data = np.load(EXAMPLE / "heldout.npz", allow_pickle=False)
    images = data["images"]
    np.savez(tmp / "calibration.npz", input=images[:calibration_images])
    model = EXAMPLE / "mnist_cnn.onnx"
    mrvl_convert.convert(model, tmp / "fp16" / "mnist_cnn")
    int8 = mrvl_convert.convert(model, tmp / "int8" / "mnist_cnn",
                                quantize=Quantization(str(tmp / "calibration.npz"), method))
    runs = {"fp32": _session(model), "fp16 hybrid": _hybrid(tmp / "fp16" / "mnist_cnn"),
            "int8 hybrid": _hybrid(int8.out_dir),
            "int8 QDQ, onnxruntime": _session(int8.out_dir / int8.manifest["quantization"]["file"])}
    out = {name: np.array([run(image) for image in images]) for name, run in runs.items()}
    out["labels"] = data["labels"]
    return out


def table(pred: Dict[str, np.ndarray], calibration_images: int) -> List[str]:
    unseen = slice(calibration_images, None)
    rows = ["| model | accuracy (500) | top-1 agreement with fp32 (500) | "
            f"agreement, the {len(pred['labels']) - calibration_images} not calibrated on |",
            "|---|---|---|---|"]
    for name in ("fp32", "fp16 hybrid", "int8 hybrid", "int8 QDQ, onnxruntime"):
        p = pred[name]
        rows.append(f"| {name} | {np.mean(p == pred['labels']):.4f} | "
                    f"{np.mean(p == pred['fp32']):.4f} | "
                    f"{np.mean(p[unseen] == pred['fp32'][unseen]):.4f} |")
    return rows


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration-images", type=int, default=64)
    parser.add_argument("--method", choices=("minmax", "entropy", "percentile"),
                        default="minmax")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        pred = predictions(args.calibration_images, args.method, Path(tmp))
    print("command: python benchmarks/int8_accuracy.py " + shlex.join(argv))
    print(f"onnxruntime {ort.__version__}, {len(pred['labels'])} held-out MNIST test images, "
          f"int8 calibrated ({args.method}) on the first {args.calibration_images}")
    print("\n".join(table(pred, args.calibration_images)))


if __name__ == "__main__":
    main(sys.argv[1:])
