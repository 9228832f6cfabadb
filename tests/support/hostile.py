"""Helpers of the adversarial tests: a canary outside the allowed directories, a record of every
file Python opens (an audit hook), and the checks that nothing leaked or was half-written.

The audit hook sees opens made by Python (``open``, ``os.open``, ``Path.read_*``, numpy, PyYAML);
onnxruntime's C++ opens are not audited, which is why ``confined`` refuses a path before any
stage file reaches onnxruntime, and why the outputs are also searched for the canary's bytes.
"""
from __future__ import annotations

import base64
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional

import numpy as np

# Known bytes that must never show up in an output: 64 float32 values, none of them NaN.
CANARY = np.arange(1001, 1065, dtype="<f4").tobytes()
RSS_LIMIT_MB = 256  # growth of the process' peak RSS allowed per hostile input


class _OpenLog:
    """Paths opened while ``watching`` is set (audit hooks cannot be removed: one, gated)."""

    def __init__(self) -> None:
        self.watching: Optional[List[str]] = None

    def __call__(self, event: str, args: tuple) -> None:
        if self.watching is not None and event == "open" and args and \
                isinstance(args[0], (str, bytes, os.PathLike)):
            self.watching.append(os.fsdecode(args[0]))


_LOG = _OpenLog()
sys.addaudithook(_LOG)


@contextmanager
def opened_files() -> Iterator[List[str]]:
    """The list of paths Python opened inside the block."""
    seen: List[str] = []
    previous, _LOG.watching = _LOG.watching, seen
    try:
        yield seen
    finally:
        _LOG.watching = previous


def make_outside(root: Path) -> Path:
    """``root/outside/`` with the canary in several names a tampered path might use."""
    outside = root / "outside"
    outside.mkdir(parents=True, exist_ok=True)
    for name in ("canary.bin", "w.bin", "canary.json"):
        (outside / name).write_bytes(CANARY)
    return outside


def assert_not_opened(opened: List[str], outside: Path) -> None:
    real = os.path.realpath(outside)
    bad = [p for p in opened if os.path.realpath(p).startswith(real + os.sep)]
    assert not bad, f"opened outside the allowed directory: {bad}"


def assert_no_canary(root: Path) -> None:
    """No file below root holds the canary's bytes, raw or as the start of a base64 payload."""
    encoded = base64.b64encode(CANARY[:48])
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert CANARY[:32] not in data and encoded not in data, f"canary bytes in {path}"


def assert_no_staging(parent: Path) -> None:
    """No hidden staging (.name.tmp-*) or swap (.name.old-*) directory left in parent."""
    if parent.exists():
        left = [p.name for p in parent.iterdir() if p.name.startswith(".")]
        assert left == [], f"left behind: {left}"


def peak_rss_mb() -> float:
    """The process' peak resident set size so far (VmHWM), in MiB."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0
