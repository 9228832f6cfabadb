"""What one row of the real corpus measures, whatever its mode: a conversion's partition and
reasons, onnxruntime's reference outputs, the fp16 floor and verify's verdict, and a failure as
the row's one-line note (an exception outside ``MrvlConvertError`` marked INTERNAL ERROR)."""
from __future__ import annotations

import collections
import json
import re
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx

import real_corpus_feeds as feeds
from real_corpus_agreement import agreement
from real_corpus_fetch import CorpusError

import mrvl_convert
from mrvl_convert.verify.fp16_floor import floor_model

if TYPE_CHECKING:  # a row's context; real_corpus_runs imports this module
    from real_corpus_runs import _Context

Row = Dict[str, Any]
Feed = Dict[str, np.ndarray]


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def failure(stage: str, error: BaseException) -> str:
    if isinstance(error, (mrvl_convert.MrvlConvertError, CorpusError)):
        return f"{stage}: {one_line(error)}"
    where = traceback.extract_tb(error.__traceback__)[-1]
    return (f"INTERNAL ERROR in {stage}: {type(error).__name__}: {one_line(error)} "
            f"({Path(where.filename).name}:{where.lineno})")


_AROUND = re.compile(r"; it (reads|feeds) .* on CPU$")


def _reasons(report: Mapping[str, Any], top: Optional[int] = None) -> List[str]:
    """Every CPU node's (op, reason), most frequent first (the table shows the first two)."""
    # a light region's reason ends with the CPU ops around it (partition/light_regions.py):
    # counted as one reason, as before, whichever ops those are
    counts = collections.Counter((e["op_type"], _AROUND.sub("", e.get("reason", "")))
                                 for e in report["nodes"] if e["placement"] == "cpu")
    return [f"{op} x{n}: {reason}" for (op, reason), n in counts.most_common(top)]


def partition(result: Any) -> Row:
    summary, report = result.summary, result.report
    shares = report.get("precision", {}).get("shares", {})
    return {"mrvl": summary["mrvl_subgraphs"], "cpu": summary["cpu_subgraphs"],
            "share": summary.get("mrvl_mac_share"), "int8_share": shares.get("int8"),
            "fits": report.get("device", {}).get("fits"), "reasons": _reasons(report)}


def reference_outputs(model: Any, test: Sequence[Feed]) -> Tuple[List[str], List[List[np.ndarray]]]:
    """The model's outputs on onnxruntime (CPU), per output, over the feeds."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outs = [session.run(None, feed) for feed in test]
    return names, [[o[k] for o in outs] for k in range(len(names))]


def floor_of(ctx: _Context, fp32: List[List[np.ndarray]], model: Any = None) -> float:
    """The fp16 floor of ``model`` (default: the model as given), against its outputs
    ``fp32``."""
    model = ctx.model if model is None else onnx.load(str(model))
    names, rounded = reference_outputs(floor_model(model), ctx.test)
    return max(feeds.relative_to_peak(got, want) for got, want in zip(rounded, fp32))


def verdict(model: Any, artifact: Path, ctx: _Context, fp32: Optional[Dict[str, list]] = None,
            against_fp32: Any = None) -> Row:
    """verify's verdict, and the worst output's error over its peak (given the reference's
    outputs ``fp32``, name -> per feed)."""
    comparison = mrvl_convert.compare(model, artifact, as_taken(ctx.test, artifact),
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
    if comparison.fp32 is not None:  # cosine, top-1 where they say something (the module)
        row.update(agreement(comparison.fp32.rows, comparison.fp32.wrecked, ctx.model))
    return row


def ratio(ctx: _Context, seconds: float) -> Optional[float]:
    return None if ctx.baseline_s is None else seconds / ctx.baseline_s


def guarded(row: Row, stage: str, fn: Callable[[], Row]) -> Row:
    try:
        row.update(fn())
    except Exception as error:  # noqa: BLE001 - a row says why, the corpus goes on
        row.setdefault("note", failure(stage, error))
    return row


def as_taken(samples: Any, artifact: Path) -> Any:
    """A float16-stored model's samples as an artifact of its float32 twin (or its int8
    artifact, whose I/O is float32) takes them: float16 inputs widened where the manifest
    declares float32."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    wide = {t["name"] for t in manifest["model"]["inputs"] if t.get("dtype") == "float32"}
    return [{k: v.astype(np.float32) if k in wide and v.dtype == np.float16 else v
             for k, v in feed.items()} for feed in samples]


def foreign_reference(qdq: Path, artifact: Path) -> Path:
    """The model an artifact of another quantizer's QDQ model is judged against: the one the
    foreign-int8 pass kept in the artifact (manifest ``foreign_int8``), else ``qdq``."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    kept = artifact / (manifest.get("foreign_int8") or {}).get("file", "")
    return kept if manifest.get("foreign_int8") and kept.is_file() else qdq
