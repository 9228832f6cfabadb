"""The device check of ResNet-50 and its OCM use, beside Marvell's published figure (docs/BOARD.md).

    python benchmarks/device_resnet50.py

Converts three ResNet-50s (fp16, the built-in profile: 8 tiles of 1 MiB OCM): v1 and the
torchvision shape of benchmarks/models.py, and the onnx wheel's light ResNet-50 as the tests
load it (tests/support/corpus.py ``zoo("resnet50")``), and prints each one's device verdict and
its OCM figures (report.json ``device.ocm``). Marvell's MarvellMLTools notebook compiles
ResNet-50 v1 fp16 for 8 tiles with 8,211,968 bytes of OCM used (97.9% of 8 MiB) and DMAs
51,464,160 bytes DRAM->OCM per inference.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
import models  # noqa: E402
from support.corpus import zoo  # noqa: E402

import mrvl_convert  # noqa: E402

MARVELL_OCM_USED, MARVELL_DMA_IN = 8_211_968, 51_464_160


def main() -> None:
    print("command: python benchmarks/device_resnet50.py")
    print(f"Marvell (notebook, v1, fp16, 8 tiles): OCM used {MARVELL_OCM_USED:,} bytes = "
          f"{MARVELL_OCM_USED / 2**23:.1%} of 8 MiB; DMA DRAM->OCM {MARVELL_DMA_IN:,} bytes")
    builds = (("ResNet-50 v1 (model zoo shape)", lambda: models.resnet(v1=True)),
              ("ResNet-50 torchvision shape", lambda: models.resnet(v1=False)),
              ('light ResNet-50 (zoo("resnet50"))', lambda: zoo("resnet50")))
    with tempfile.TemporaryDirectory() as tmp:
        for index, (label, build) in enumerate(builds):
            device = mrvl_convert.convert(build(), Path(tmp) / str(index),
                                          estimate=True).report["device"]
            ocm = device["ocm"]
            for sub in ocm["subgraphs"]:
                print(f"\n{label}: fits {device['fits']}, {device['slots']} slot(s); "
                      f"{sub['name']}: weights {sub['weight_bytes']:,} bytes "
                      f"({sub['weight_bytes'] / MARVELL_DMA_IN:.3f} x Marvell's DMA in), "
                      f"largest activations {sub['peak_activation_bytes']:,} bytes "
                      f"({sub['peak_activation_layer']}), weights + largest activations "
                      f"{sub['resident_bytes']:,} bytes = "
                      f"{sub['resident_bytes'] / ocm['capacity_bytes']:.0%} of the OCM; "
                      f"largest layer {sub['largest_layer']} {sub['largest_layer_bytes']:,} "
                      f"bytes = {sub['largest_layer_use']:.1%} of the OCM; "
                      f"{sub['layers_over']} layers over the OCM")


if __name__ == "__main__":
    main()
