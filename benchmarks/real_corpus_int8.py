"""The int8 rows of one real-corpus model: our recipe (``--quantize int8``) and onnxruntime's
quantize_static (per-channel and per-tensor) converted as another quantizer's QDQ model."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import numpy as np
import onnx
from onnx import version_converter

from real_corpus_verdicts import (Feed, Row, failure, foreign_reference, guarded, one_line,
                                  partition, ratio, verdict)

from mrvl_convert.quantize import Quantization

if TYPE_CHECKING:  # a row's context; real_corpus_runs imports this module
    from real_corpus_runs import _Context


class _Reader:
    """An onnxruntime CalibrationDataReader over a list of feeds."""

    def __init__(self, samples: List[Feed]) -> None:
        self._iter = iter(samples)

    def get_next(self) -> Optional[Feed]:
        return next(self._iter, None)

    def rewind(self) -> None:  # onnxruntime's readers may be rewound; ours are made anew
        pass


def int8_row(ctx: _Context, calibrate: int) -> Row:
    row: Row = {"model": ctx.entry.name, "package": ctx.entry.spec, "mode": "int8",
                "data": ctx.entry.data}
    artifact = ctx.work / "int8"
    try:
        calibration = _calibration(ctx, ctx.draw(calibrate, seed=1))
        result, seconds = ctx.convert(ctx.path, artifact,
                                      quantize=Quantization(calibration, "minmax"))
    except Exception as error:  # noqa: BLE001
        row["note"] = failure("convert --quantize int8", error)
        return row
    row.update(partition(result), convert_s=seconds, ratio=ratio(ctx, seconds))
    qdq = artifact / result.manifest["quantization"]["file"]
    return guarded(row, "verify int8", lambda: verdict(qdq, artifact, ctx,
                                                       against_fp32=ctx.path))


def _calibration(ctx: _Context, samples: List[Feed]) -> Any:
    """Feeds stacked on axis 0, as a user gives them (the recipe cuts them back in batches of
    the input's static batch size, 1 if dynamic). Where axis 0 is no batch (an input of rank
    < 2: a sample rate, an image size; or a dynamic first dim pinned above 1: madmom's
    ``[frames, bins]``), or where the inputs' axis 0 differ, that cut would feed other shapes,
    so a CalibrationDataReader feeds them as they are."""
    from onnxruntime.quantization import CalibrationDataReader

    first = {t.name: t.type.tensor_type.shape.dim[:1] for t in ctx.model.graph.input}
    unbatched = [n for n, (shape, _) in ctx.specs.items() if len(shape) < 2 or (
        first[n] and not first[n][0].HasField("dim_value") and shape[0] != 1)]
    # inputs whose axis 0 differ (silero's state [2, 1, 128] beside its [1, 512] chunk): the
    # recipe would count each input's rows as its samples
    mixed = len({shape[0] for shape, _ in ctx.specs.values() if shape}) > 1
    if unbatched or mixed:
        return type("Reader", (_Reader, CalibrationDataReader), {})(samples)
    return {n: np.concatenate([s[n] for s in samples]) for n in samples[0]}


def foreign_rows(ctx: _Context, calibrate: int) -> List[Row]:
    """The float model quantized by onnxruntime's quantize_static (per-channel and
    per-tensor), converted as given, verified against that QDQ model."""
    rows = []
    for label, per_channel in (("ort QDQ per-channel", True), ("ort QDQ per-tensor", False)):
        row: Row = {"model": ctx.entry.name, "package": ctx.entry.spec, "mode": label,
                    "data": ctx.entry.data}
        qdq = ctx.work / f"foreign_{per_channel}.onnx"
        artifact = ctx.work / f"foreign_{per_channel}"
        try:
            _ort_quantize(ctx, qdq, per_channel, calibrate)
        except Exception as error:  # noqa: BLE001 - onnxruntime's failure, not ours
            row["note"] = f"quantize_static: {type(error).__name__}: {one_line(error)}"
            rows.append(row)
            continue
        try:
            result, seconds = ctx.convert(qdq, artifact)
        except Exception as error:  # noqa: BLE001
            row["note"] = failure("convert", error)
            rows.append(row)
            continue
        row.update(partition(result), convert_s=seconds, ratio=ratio(ctx, seconds))
        # as mrvl-verify does: judged against the model the foreign-int8 pass kept (the
        # requantized QDQ model, or the float form), not the QDQ model as given
        rows.append(guarded(row, "verify", lambda: verdict(foreign_reference(qdq, artifact),
                                                           artifact, ctx,
                                                           against_fp32=ctx.path)))
    return rows


def _ort_quantize(ctx: _Context, out: Path, per_channel: bool, calibrate: int) -> None:
    from onnxruntime.quantization import CalibrationDataReader, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    fixed = ctx.work / "fixed.onnx"
    if not fixed.exists():  # the pinned shapes written into the model, as a user would
        model = onnx.load(str(ctx.path))
        for tensor in model.graph.input:
            if tensor.name in ctx.shapes:
                for dim, size in zip(tensor.type.tensor_type.shape.dim,
                                     ctx.shapes[tensor.name]):
                    dim.Clear()
                    dim.dim_value = size
        if _opset(model) < 13:  # per-channel DequantizeLinear (axis) needs opset 13, as
            model = version_converter.convert_version(model, 13)  # ort's docs advise
        onnx.save(model, str(fixed))
        quant_pre_process(str(fixed), str(fixed), skip_symbolic_shape=True)
    reader = type("Reader", (_Reader, CalibrationDataReader), {})(ctx.draw(calibrate, seed=1))  # noqa: E501
    quantize_static(str(fixed), str(out), reader, per_channel=per_channel)


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
