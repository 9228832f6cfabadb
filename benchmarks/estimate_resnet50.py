"""The per-layer ESTIMATE table of ResNet-50 in docs/ESTIMATE.md, and the calibration check.

    python benchmarks/estimate_resnet50.py

Builds ResNet-50 twice with seeded random weights (benchmarks/models.py): v1 (stride on the first
1x1 conv of a block, the ONNX model zoo's model that mrvl-mlsim ran) and torchvision's shape
(stride on the 3x3), converts both with the built-in hardware profile and prints, for each, the
estimated total against the public 5,674.07 us, the MAC count against the public 3,857,973,248
matmul ops, the tiles sweep, and (torchvision-shaped) the per-layer table as Markdown.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import models  # noqa: E402

import mrvl_convert  # noqa: E402
from mrvl_convert.estimate import estimate_artifact  # noqa: E402

PUBLIC_US, PUBLIC_OPS = 5674.071, 3_857_973_248


def main() -> None:
    print("command: python benchmarks/estimate_resnet50.py")
    with tempfile.TemporaryDirectory() as tmp:
        for label, v1 in (("ResNet-50 v1 (model zoo shape)", True),
                          ("ResNet-50 torchvision shape", False)):
            out = Path(tmp) / ("v1" if v1 else "tv")
            est = mrvl_convert.convert(models.resnet(v1=v1), out, estimate=True).report["estimate"]
            stage = est["stages"][0]
            print(f"\n{label}: estimate {est['mrvl_microseconds']:.1f} us "
                  f"({(est['mrvl_microseconds'] / PUBLIC_US - 1):+.1%} against {PUBLIC_US} us); "
                  f"{est['matmul_macs']:,} MACs ({est['matmul_macs'] / PUBLIC_OPS:.4f} x the "
                  f"public matmul ops); DDR {stage['ddr_bytes']:,} bytes; MAC efficiency "
                  f"{est['matmul_macs'] / (est['mrvl_cycles'] * 8 * 250):.1%}")
            sweep = {t: estimate_artifact(out, tiles=t)["mrvl_microseconds"] for t in (1, 2, 4, 8)}
            print("tiles sweep (us): " + ", ".join(f"{t}: {us:.0f}" for t, us in sweep.items()))
            if not v1:
                print_table(stage)


def print_table(stage) -> None:
    print("\n| layer | kind | source nodes | MMACs | weights KB | DDR KB | compute cyc | "
          "memory cyc | est. us | bound |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    for row in stage["layers"]:
        src = ", ".join(row["source_nodes"][:1]) + (" ..." if len(row["source_nodes"]) > 1 else "")
        print(f"| {row['layer'].rsplit('_', 1)[-1]} | {row['kind']} | {src} | "
              f"{row['macs'] / 1e6:.1f} | {row['weight_bytes'] / 1024:.0f} | "
              f"{row['ddr_bytes'] / 1024:.0f} | {row['compute_cycles']:,} | "
              f"{row['memory_cycles']:,} | {row['microseconds']:.1f} | {row['bound']} |")
    print(f"| total | | | {stage['matmul_macs'] / 1e6:.1f} | {stage['weight_bytes'] / 1024:.0f} | "
          f"{stage['ddr_bytes'] / 1024:.0f} | | | {stage['microseconds']:.1f} | |")


if __name__ == "__main__":
    main()
