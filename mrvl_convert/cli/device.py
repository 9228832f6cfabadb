"""What ``mrvl-convert`` prints of the device check and of the estimate, after the table."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from mrvl_convert.batch import BatchResult
from mrvl_convert.estimate.int8_flow import line as int8_flow_line


def device_lines(result: BatchResult) -> List[str]:
    """One line per converted model that does not fit the device: the limits it is over and
    what to do (report.json ``device`` has every figure)."""
    lines = []
    for outcome in result:
        device = outcome.device
        if outcome.converted and device is not None and not device["fits"]:
            lines.append(f"{outcome.name}: does not fit one device: "
                         + " | ".join(device["reasons"]))
        if outcome.converted and device is not None and device.get("int8_flow"):
            lines.append(int8_flow_line(outcome.name, device["int8_flow"]))
    return lines


def print_device(result: BatchResult, emit: Callable[[str], None]) -> None:
    for line in device_lines(result):
        emit(line)


def print_estimates(result: BatchResult, *, layers: bool) -> None:
    """The estimate of every converted model (a model whose verify failed too): totals per
    model and stage, and every layer with ``layers`` (-v)."""
    from mrvl_convert.estimate import format_table
    for outcome in result:
        if not outcome.converted:
            continue
        estimate = _estimate_of(Path(outcome.out_dir))
        if estimate is not None:
            sys.stdout.write(f"{outcome.name}: ")
            sys.stdout.write(format_table(estimate, layers=layers))


def _estimate_of(out_dir: Path) -> Optional[Dict[str, Any]]:
    report = json.loads((out_dir / "report.json").read_text(encoding="utf-8"))
    return report.get("estimate")
