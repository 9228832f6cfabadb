"""What mrvl-convert says about a conversion besides its table: third-party warnings (shown only
with -v), the one line per input whose static shape --input-shape replaced, the
calibration's warnings (arrays not used, samples left over) the manifest recorded, and a line
when a ``--quantize int8`` conversion runs less than half of its MACs in int8 on the accelerator
(naming the reason that keeps the most MACs out of it, from report.json ``precision``).

Conversions may run in worker processes (forkserver/spawn) that inherit nothing of this process
but its environment and its ``-W`` options: -v reaches them as ``MRVL_CONVERT_VERBOSE=1`` (read
by ``frontend.folding``), and the library's ``InputShapeOverrideWarning`` and
``CalibrationWarning`` are silenced there by a ``-W`` option (multiprocessing passes
``sys.warnoptions`` on), since this process prints the line itself, once, from each artifact's
manifest.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import Any, Callable, Dict, Iterator, List

from mrvl_convert.errors import CalibrationWarning, InputShapeOverrideWarning
from mrvl_convert.frontend.folding import VERBOSE_ENV
from mrvl_convert.frontend.input_shapes import OVERRIDE_PREFIX
from mrvl_convert.quantize.calibration import CALIBRATION_PREFIX

# Below this share of its MACs in int8 on the accelerator, an int8 conversion is warned about.
MIN_INT8_SHARE = 0.5


@contextlib.contextmanager
def conversion_notices(verbose: bool) -> Iterator[None]:
    """For the conversions run inside: third-party warnings as -v says, and no Python warning
    for a replaced input shape (``override_lines`` says it); all restored after."""
    saved_env = os.environ.get(VERBOSE_ENV)
    saved_options = list(sys.warnoptions)
    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    sys.warnoptions += [f"ignore:{OVERRIDE_PREFIX}", f"ignore:{CALIBRATION_PREFIX}"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InputShapeOverrideWarning)
            warnings.simplefilter("ignore", CalibrationWarning)
            yield
    finally:
        sys.warnoptions[:] = saved_options
        if saved_env is None:
            os.environ.pop(VERBOSE_ENV, None)
        else:
            os.environ[VERBOSE_ENV] = saved_env


def override_lines(result: Any) -> List[str]:
    """One line per input whose static dims --input-shape replaced, and per calibration
    warning, from each model's manifest as its conversion wrote it (``Outcome.notices``)."""
    lines = []
    for outcome in result:
        if not outcome.converted:
            continue
        notices = outcome.notices
        for name, shapes in notices.get("input_shape_overrides", {}).items():
            lines.append(f"warning: model {outcome.model}: input {name!r} is declared "
                         f"{shapes['declared']}; converted for the given shape {shapes['used']} "
                         "(--input-shape replaces its static dims)")
        lines += [f"warning: model {outcome.model}: {text}"
                  for text in notices.get("calibration_warnings", [])]
        if "foreign_int8" in notices:
            lines.append(f"note: model {outcome.model}: {notices['foreign_int8']}")
        if "int8" in notices:
            lines += int8_share_lines(outcome.model, notices["int8"])
    return lines


def int8_share_lines(model: str, int8: Dict[str, Any]) -> List[str]:
    """The warning of an int8 conversion with less than ``MIN_INT8_SHARE`` of its MACs in int8
    on the accelerator (none for a model without MACs): the shares, and the reason that cut most."""
    shares = int8["shares"]
    if not any(shares.values()) or shares["int8"] >= MIN_INT8_SHARE:
        return []
    line = (f"warning: model {model}: only {_pct(shares['int8'])} of the MACs run int8 on the "
            f"accelerator (fp16 on it {_pct(shares['fp16'])}, CPU {_pct(shares['cpu'])})")
    if int8["not_int8"]:
        top = int8["not_int8"][0]
        nodes = ", ".join(top["nodes"][:3]) + (", ..." if len(top["nodes"]) > 3 else "")
        line += f"; most cut by: {top['reason']} ({_pct(top['share'])} of the MACs: {nodes})"
    return [line + "; report.json precision.not_int8 lists every reason"]


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def print_override_lines(result: Any, error: Callable[[str], None]) -> None:
    for line in override_lines(result):
        error(line)
