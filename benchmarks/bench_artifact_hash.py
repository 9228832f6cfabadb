"""What checking the stage files' sha256 costs when an artifact is opened. Not a test.

    python benchmarks/bench_artifact_hash.py [--model resnet50] [--repeat 5]

Converts a corpus model (ResNet-50 by default, the largest), makes a second copy of the artifact
whose manifest records no hashes (read as an artifact written before they were recorded: the
check is skipped), and prints the median wall time of opening a ``HybridSession`` and of
``estimate_artifact`` on each, their ratio, and the time of the check alone
(``check_stage_files``). The stage files' pages are read once before timing, so every run finds
them in the page cache: the figures are hashing, not disk, time.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.append(str(HERE))  # after tests/: benchmarks/models.py is another module
import corpus  # noqa: E402
from bench_convert import median_time  # noqa: E402

import mrvl_convert  # noqa: E402
from mrvl_convert.core.file_hashes import check_stage_files  # noqa: E402
from mrvl_convert.estimate import estimate_artifact  # noqa: E402
from mrvl_convert.runtime.session import HybridSession  # noqa: E402


def _without_hashes(artifact: Path, target: Path) -> Path:
    shutil.copytree(artifact, target)
    manifest = json.loads((target / "manifest.json").read_text())
    for stage in manifest["stages"]:
        del stage["sha256"]
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="a corpus.ZOO model")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        hashed = Path(tmp) / "hashed"
        mrvl_convert.convert(corpus.zoo(args.model), hashed, name=args.model)
        plain = _without_hashes(hashed, Path(tmp) / "plain")
        manifest = json.loads((hashed / "manifest.json").read_text())
        size = sum(p.stat().st_size for p in hashed.iterdir()
                   if p.name not in ("manifest.json", "report.json"))
        for directory in (hashed, plain):   # warm the page cache and every lazy import
            HybridSession(directory)
            estimate_artifact(directory)
        check = median_time(lambda: check_stage_files(hashed, manifest, "manifest.json"),
                            args.repeat)
        print(f"{args.model}: {len(manifest['stages'])} stages, stage files {size / 2**20:.1f} MiB;"
              f" median of {args.repeat}")
        print(f"  check_stage_files alone     {check * 1e3:8.1f} ms "
              f"({size / 2**20 / check:.0f} MiB/s)")
        for what, open_ in (("HybridSession(dir)", HybridSession),
                            ("estimate_artifact(dir)", estimate_artifact)):
            with_check, without = _alternating(lambda: open_(hashed), lambda: open_(plain),
                                               args.repeat)
            print(f"  {what:<26}  {with_check * 1e3:8.1f} ms with the check, "
                  f"{without * 1e3:8.1f} ms without: x{with_check / without:.3f} "
                  f"(check alone / without: +{check / without:.1%})")
    return 0


def _alternating(first, second, repeat: int):
    """Medians of ``first`` and ``second`` run in turns: a shared machine's load hits both."""
    times = [[], []]
    for _ in range(repeat):
        for k, fn in enumerate((first, second)):
            times[k].append(median_time(fn, 1))
    return statistics.median(times[0]), statistics.median(times[1])


if __name__ == "__main__":
    sys.exit(main())
