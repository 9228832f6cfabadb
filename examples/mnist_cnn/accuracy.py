"""fp32 (onnxruntime) vs fp16 hybrid accuracy of the example on its 500 held-out test images.

    python examples/mnist_cnn/accuracy.py [--policy single|multi]

Converts the example into a temporary directory, runs every held-out image through the original
model on onnxruntime and through HybridSession, and prints both accuracies against the true
labels and how often the two agree on the top-1 class.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

import mrvl_convert

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=("single", "multi"), default="single")
    args = parser.parse_args()
    data = np.load(HERE / "heldout.npz")
    images, labels = data["images"], data["labels"]
    reference = ort.InferenceSession(str(HERE / "mnist_cnn.onnx"), providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory() as tmp:
        mrvl_convert.convert(HERE / "mnist_cnn.onnx", Path(tmp) / "mnist_cnn", policy=args.policy)
        hybrid = mrvl_convert.HybridSession(Path(tmp) / "mnist_cnn")
        fp32 = np.array([reference.run(None, {"input": x[None]})[0].argmax() for x in images])
        fp16 = np.array([hybrid.run(None, {"input": x[None]})[0].argmax() for x in images])
    print(f"command: python examples/mnist_cnn/accuracy.py --policy {args.policy}")
    print(f"images: {len(labels)} held-out MNIST test images")
    print(f"fp32 onnxruntime accuracy: {np.mean(fp32 == labels):.4f}")
    print(f"fp16 hybrid accuracy:      {np.mean(fp16 == labels):.4f}")
    print(f"top-1 agreement:           {np.mean(fp32 == fp16):.4f}")


if __name__ == "__main__":
    main()
