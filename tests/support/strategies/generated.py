"""A generated model and its spec: ``GeneratedModel`` prints as the ``from_spec(...)`` call that
rebuilds it (weights and feeds included), so a falsifying example printed by hypothesis can be
pasted into an ``@example(...)`` as it is; ``quantized`` turns one into its QDQ int8 form.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import onnx

from support.strategies.model_builder import ModelBuilder


@dataclass(repr=False)
class GeneratedModel:
    model: onnx.ModelProto
    feeds: Dict[str, np.ndarray]
    description: str
    spec: Optional[dict] = field(default=None)
    #: concrete shapes for inputs with a symbolic batch dim (pass as convert(..., shapes=...))
    shapes: Optional[Dict[str, List[int]]] = field(default=None)

    #: the function that rebuilds a model from its spec, named in the repr
    rebuilt_by = "from_spec"

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        if self.spec is not None:
            return f"{self.rebuilt_by}({json.dumps(self.spec, separators=(',', ':'))})"
        return f"GeneratedModel(<{self.description!r}>)"

    def __str__(self) -> str:
        return self.description

    def _repr_pretty_(self, p, cycle) -> None:  # hypothesis' pretty printer
        p.text(repr(self))


def from_spec(spec: dict) -> GeneratedModel:
    """Rebuild a model (weights and feeds included) from the spec a generated model carries.

    spec: {"opset", "seed", "steps": [[builder method, args, kwargs], ...], "outputs"} and
    optionally "const_nodes" (weights as Constant nodes), "names" (naming style),
    "dynamic_batch" (True: inputs get a symbolic batch dim "N"; "-1": inputs and outputs get
    Paddle's ``dim_value: -1``; GeneratedModel.shapes fixes it)."""
    b = ModelBuilder(spec["opset"], spec["seed"], const_nodes=spec.get("const_nodes", False),
                     names=spec.get("names", "plain"))
    for method, args, kwargs in spec["steps"]:
        getattr(b, method)(*args, **kwargs)
    gm = _finish(b, spec["outputs"], spec.get("dynamic_batch", False))
    return quantized(gm, **spec["quantize"]) if "quantize" in spec else gm


def _finish(b: ModelBuilder, outputs: Sequence[str], dynamic_batch: Any = False) -> GeneratedModel:
    spec = {"opset": b.opset, "seed": b.seed, "steps": b.steps, "outputs": list(outputs)}
    shapes = None
    if dynamic_batch and b.batched:
        spec["dynamic_batch"] = dynamic_batch
        shapes = {i: b.shape(i) for i in b.batched}
    if b.const_nodes:
        spec["const_nodes"] = True
    if b.names != "plain":
        spec["names"] = b.names
    desc = "\n".join([f"opset {b.opset}, seed {b.seed}, {b.names} names"
                      + (", weights as Constant nodes" if b.const_nodes else "")]
                     + b.lines + [f"outputs: {list(outputs)}"]
                     + ([f"dynamic batch dim {'-1' if dynamic_batch == '-1' else 'N'} on "
                         f"{sorted(shapes)}"] if shapes else []))
    return GeneratedModel(b.build(outputs, dynamic_batch if shapes else False), b.feeds(), desc,
                          spec, shapes)


# ==================================================================== QDQ (int8) models


def quantized(gm: GeneratedModel, samples: int = 4, method: str = "minmax") -> GeneratedModel:
    """``gm`` quantized with Marvell's recipe (mrvl_convert.quantize.recipe.quantize_int8) on seeded
    calibration data: ``samples`` random batches per input (seed from the spec), plus the
    model's own feeds so they fall inside the calibrated ranges. The spec records it
    (``"quantize"``), so ``from_spec`` rebuilds the QDQ model."""
    import tempfile
    from pathlib import Path

    from mrvl_convert.quantize.recipe import quantize_int8

    rng = np.random.default_rng(gm.spec["seed"] + 2)
    calibration = {name: np.concatenate([feed] + [
        (rng.standard_normal(feed.shape) * float(np.std(feed) or 1.0)).astype(np.float32)
        for _ in range(samples)]) for name, feed in gm.feeds.items()}
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(gm.model, str(Path(tmp) / "float.onnx"))
        qdq = quantize_int8(Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx", calibration,
                            method=method)
        model = onnx.load(str(qdq))
    spec = {**gm.spec, "quantize": {"samples": samples, "method": method}}
    return GeneratedModel(model, gm.feeds, f"{gm.description}\nquantized: int8 QDQ, "
                          f"{method}, {samples} seeded calibration batches", spec)
