"""What ``mrvl-convert`` prints of the device check and of the estimate, after the table."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from mrvl_convert.batch import BatchResult
from mrvl_convert.estimate.int8_flow import line as int8_flow_line


#: Reasons printed per model: a graph-heavy model has one per tensor per subgraph (tiny-pron:
#: a 611 KB line); report.json ``device.reasons`` keeps every one.
SHOWN_REASONS = 3


def device_lines(result: BatchResult) -> List[str]:
    """One line per converted model that does not fit the device: the limits it is over and
    what to do, the first ``SHOWN_REASONS`` of them and how many more (report.json
    ``device`` has every figure)."""
    lines = []
    for outcome in result:
        device = outcome.device
        if outcome.converted and device is not None and not device["fits"]:
            lines.append(f"{outcome.name}: does not fit one device: "
                         + _bounded(device["reasons"], outcome.out_dir))
        if outcome.converted and device is not None and device.get("int8_flow"):
            lines.append(int8_flow_line(outcome.name, device["int8_flow"]))
    return lines


def _bounded(reasons: List[str], out_dir: str) -> str:
    shown = " | ".join(reasons[:SHOWN_REASONS])
    more = len(reasons) - SHOWN_REASONS
    if more <= 0:
        return shown
    return (f"{shown} | and {more} more ({len(reasons)} in all: "
            f"{Path(out_dir) / 'report.json'}, device.reasons)")


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
