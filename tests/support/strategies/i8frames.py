"""madmom-like batchless frame networks (``seqaxis.sequence_from_spec``) drawn with the forms
whose int8 twins follow the fp16 ones: sliding windows of frames read by an FC
(``window_conv.py`` through Q/DQ pairs) and a mean over the frames (``int8_means.py``);
converted in int8 by our recipe on seeded calibration."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from hypothesis import strategies as st

import mrvl_convert
from mrvl_convert.quantize import Quantization
from support.strategies.seqaxis import PER_FRAME, SequenceModel, sequence_from_spec


# onnxruntime 1.18's quantize_static gives each window's Unsqueeze a scale of its own where
# 1.19+ gives the Slices and Unsqueezes the frames' scale: windows of different scales are no
# one function of each frame element, so window_conv.py leaves them (a Concat at batch T) and
# that version draws no windows.
_WINDOWS = [0, 2, 3, 7] if tuple(int(v) for v in ort.__version__.split(".")[:2]) >= (1, 19) \
    else [0]


@st.composite
def int8_frame_models(draw) -> SequenceModel:
    spec = {"seed": draw(st.integers(0, 2**16)), "frames": draw(st.integers(16, 40)),
            "bins": draw(st.integers(3, 8)), "channels": draw(st.sampled_from([4, 8])),
            "windows": draw(st.sampled_from(_WINDOWS)),
            "dilation": draw(st.integers(1, 2)), "stack_axis": draw(st.sampled_from([1, 2])),
            "per_frame": draw(st.lists(st.sampled_from(PER_FRAME), max_size=2)),
            "mean": draw(st.booleans())}
    return sequence_from_spec(spec)


def convert_int8(case: SequenceModel, out: Path):
    """The model in int8 by our recipe on 8 seeded calibration inputs of its frames."""
    shape = [case.spec["frames"], case.spec["bins"]]
    rng = np.random.default_rng(case.spec["seed"] + 1)
    calibration = {"x": rng.standard_normal([8] + shape).astype(np.float32)}
    return mrvl_convert.convert(case.model, out, shapes={"x": shape},
                                quantize=Quantization(calibration))
