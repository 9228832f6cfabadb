"""A model converted to one Mrvl subgraph and nothing on the CPU, its hybrid run within the
fp16 tolerance of onnxruntime's fp32 run of the original."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
import onnx

from mrvl_convert import HybridSession, convert
from support.backend_cases import assert_fp16_close
from support.models import run_ort


def assert_whole_mrvl(model: onnx.ModelProto, out_dir: Path, feed: Dict[str, np.ndarray],
                      what: str) -> None:
    result = convert(model, out_dir)
    assert (result.summary["mrvl_subgraphs"], result.summary["cpu_subgraphs"]) == (1, 0), \
        result.summary
    got = HybridSession(out_dir).run(None, feed)[0]
    assert_fp16_close(got, next(iter(run_ort(model, feed, optimize=False).values())), what)
