"""What ``benchmarks/int8_trained.py`` measures of an artifact: agreement with the fp32 model
on the test samples, task accuracy, subgraphs and MAC share; the ``--keep-fp16 auto`` search and
the layers kept by hand, each judged the same way."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).parent))
from int8_photographs import ort_session  # noqa: E402
from int8_trained_data import CONFIDENT, DB_THRESHOLD, TARGET, Model  # noqa: E402

import mrvl_convert  # noqa: E402
from mrvl_convert.options import ConvertOptions  # noqa: E402
from mrvl_convert.quantize import Quantization  # noqa: E402
from mrvl_convert.tune.keep_fp16 import quantize_keep_fp16  # noqa: E402


def _run(run_one: Callable[[np.ndarray], np.ndarray], inputs: np.ndarray) -> np.ndarray:
    return np.concatenate([run_one(sample[None]) for sample in inputs])


def agreement(got: np.ndarray, want: np.ndarray, measure: str) -> np.ndarray:
    """Per sample: top-1 the same (``top1``), the share of pixels on the same side of DBNet's
    text threshold (``pixels``), or the cosine of the raw outputs (``cosine``)."""
    if measure == "top1":
        return (got.argmax(-1) == want.argmax(-1)).astype(np.float64)
    if measure == "pixels":
        same = (got > DB_THRESHOLD) == (want > DB_THRESHOLD)
        return same.reshape(len(same), -1).mean(1)
    g = got.reshape(len(got), -1).astype(np.float64)
    w = want.reshape(len(want), -1).astype(np.float64)
    return (g * w).sum(1) / np.maximum(np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1),
                                       1e-30)


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def _artifact_figures(artifact: Path, test: np.ndarray, fp32: np.ndarray, model: Model,
                      truth: Optional[Dict[str, np.ndarray]] = None) -> Dict[str, object]:
    """The artifact's agreement on the test samples, its subgraphs and MAC share; with
    ``truth`` (classifiers) also its task accuracy and its agreement on the samples fp32 is
    sure of (``truth["confident"]``: top-2 margin at least ``CONFIDENT``)."""
    session = mrvl_convert.HybridSession(artifact)
    got = _run(lambda x: session.run(None, {model.input_name: x})[0], test)
    per_sample = agreement(got, fp32, model.measure)
    manifest = json.loads((artifact / "manifest.json").read_text())
    report = json.loads((artifact / "report.json").read_text())
    kinds = [s["kind"] for s in manifest["stages"]]
    frag = report.get("summary", {})
    row = {"agreement": float(per_sample.mean()), "per_sample": per_sample,
           "mrvl": kinds.count("mrvl"), "cpu": kinds.count("cpu"),
           "mrvl_mac_share": frag.get("mrvl_mac_share")}
    if truth is not None:
        sure = truth["confident"]
        row["task_accuracy"] = float((got.argmax(-1) == truth["labels"]).mean())
        row["confident_agreement"] = float(per_sample[sure].mean()) if sure.any() else None
    return row


def _truth(fp32: np.ndarray, test_count: int) -> Dict[str, np.ndarray]:
    """A classifier's labels (the turn of each crop, as the data makers draw it) and which
    test samples fp32 is sure of (top-2 probability margin at least ``CONFIDENT``)."""
    probs = fp32  # both classifiers end in a softmax; others: take one
    if not (np.all(fp32 >= 0) and np.allclose(fp32.sum(-1), 1.0, atol=1e-3)):
        probs = np.exp(fp32 - fp32.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
    top2 = np.sort(probs, -1)[:, -2:]
    labels = np.arange(test_count) % fp32.shape[-1]
    if fp32.shape[-1] == 4:
        labels = (4 - labels) % 4
    return {"labels": labels, "margin": top2[:, 1] - top2[:, 0],
            "confident": top2[:, 1] - top2[:, 0] >= CONFIDENT}


def _keep_auto(model: Model, path: Path, calib: np.ndarray, test: np.ndarray,
               fp32: np.ndarray, rounds: int, tmp: Path,
               truth: Optional[Dict[str, np.ndarray]] = None, target: float = TARGET,
               bias_correction: bool = False) -> Dict[str, object]:
    start = time.time()
    qdq = tmp / f"{model.name}.keep.onnx"
    result = quantize_keep_fp16(path, qdq, {"x": calib}, "auto", min_agreement=target,
                                max_rounds=rounds, bias_correction=bias_correction,
                                options=ConvertOptions(shapes={"x": list(model.shape)}))
    # What mrvl-convert then writes: quantized on all the calibration samples, the chosen
    # nodes kept in float (the search's own model was calibrated on its choice half).
    artifact = tmp / f"{model.name}_keep"
    mrvl_convert.convert(path, artifact, name=model.name, shapes={"x": list(model.shape)},
                         quantize=result.quantization(Quantization(
                             {"x": calib}, bias_correction=bias_correction)))
    row = _artifact_figures(artifact, test, fp32, model, truth)
    # The model the search judged (calibrated on its choice half) on the same test samples:
    # tells the held-out half's noise apart from what calibrating on all 64 changes.
    own = tmp / f"{model.name}_keep_own"
    mrvl_convert.convert(onnx.load(str(qdq)), own, name=model.name,
                         shapes={"x": list(model.shape)})
    doc = result.to_dict()
    doc.update(search_model_test=_artifact_figures(own, test, fp32, model)["agreement"])
    doc.update(task_accuracy=row.get("task_accuracy"),
               confident_agreement=row.get("confident_agreement"))
    doc.update(test_agreement=row["agreement"], mrvl=row["mrvl"], cpu=row["cpu"],
               mrvl_mac_share=row["mrvl_mac_share"], seconds=round(time.time() - start, 1),
               summary=result.summary(), per_sample=row["per_sample"],
               recipes_kept=result.recipes_text())
    print(f"{model.name:12s} keep-fp16 auto {target}: {result.summary()}; on the "
          f"{len(test)} test samples {row['agreement']:.3f} (the search's own model "
          f"{doc['search_model_test']:.3f}) ({doc['seconds']} s)", flush=True)
    return doc


def _hand(model: Model, path: Path, calib: np.ndarray, test: np.ndarray, fp32: np.ndarray,
          tmp: Path, plain: Dict[str, object]) -> List[Dict[str, object]]:
    """Convs kept in fp16 by hand (issue 39): the artifact and onnxruntime's run of the QDQ
    model, on the test samples, and the paired counts against plain minmax."""
    from mrvl_convert.frontend.load import name_nodes
    proto = onnx.load(str(path))
    name_nodes(proto)
    convs = [n.name for n in proto.graph.node if n.op_type == "Conv"]
    plain_qdq = tmp / f"{model.name}_minmax" / json.loads(
        (tmp / f"{model.name}_minmax" / "manifest.json").read_text())["quantization"]["file"]
    ort_plain = _ort_top1(plain_qdq, test, fp32)
    rows = []
    for label, keep in (("first Conv", convs[:1]), ("first 4 + last 2 Convs",
                                                     convs[:4] + convs[-2:])):
        qdq = tmp / f"{model.name}_hand.onnx"
        quantize_keep_fp16(path, qdq, {"x": calib}, keep)
        artifact = tmp / f"{model.name}_hand_{len(keep)}"
        mrvl_convert.convert(onnx.load(str(qdq)), artifact, name=model.name,
                             shapes={"x": list(model.shape)})
        row = _artifact_figures(artifact, test, fp32, model)
        ort_kept = _ort_top1(qdq, test, fp32)
        ours, base = row["per_sample"], plain["per_sample"]
        rows.append({"kept": label, "nodes": keep, "agreement": row["agreement"],
                     "ort_agreement": float(ort_kept.mean()),
                     "ort_plain": float(ort_plain.mean()),
                     "gained": int(((ours == 1) & (base == 0)).sum()),
                     "lost": int(((ours == 0) & (base == 1)).sum()),
                     "ort_gained": int(((ort_kept == 1) & (ort_plain == 0)).sum()),
                     "ort_lost": int(((ort_kept == 0) & (ort_plain == 1)).sum())})
        print(f"{model.name:12s} hand: {label}: {rows[-1]}", flush=True)
    return rows


def _ort_top1(qdq: Path, test: np.ndarray, fp32: np.ndarray) -> np.ndarray:
    session = ort_session(qdq, qdq_as_written=True)
    got = _run(lambda x: session.run(None, {"x": x})[0], test)
    return agreement(got, fp32, "top1")
