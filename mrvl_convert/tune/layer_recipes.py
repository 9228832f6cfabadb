"""The recipes ``--keep-fp16 auto --min-agreement`` tries before it keeps any layer in fp16
(issue 44): Marvell's int8 is fixed (per-tensor symmetric, no zero point), so what can change is
how each tensor is quantized; a layer mended that way stays int8 and costs no MACs.

- **model-wide**, tried once each where the user did not ask for it: cross-layer equalization
  (``quantize/equalize.py``: only the pairs where it is exact) and bias correction of every Conv
  (``quantize/bias_correct.py``); the better of the user's recipe and these (by choice-sample
  agreement, then output SNR) is the base;
- **per layer**, on the candidate layers in their isolated-SNR order (at most
  ``RECIPE_LAYERS``): bias correction of that layer's Conv alone, and its output's range chosen
  by MSE (``mse_ranges``: the clip of the symmetric int8 range, a share of the observed absmax,
  whose quantize-dequantize error on the layer's float output is least). Each is one trial on
  the choice samples; a recipe is kept for a layer when it removes output noise against the
  base (the best of the layer's recipes). The kept recipes are tried together; when that is not
  better than the best one alone, only that one is kept, and none when it is not better than
  the base either. What each layer got is in the manifest and the summary line.

The range choice measures the float outputs on at most ``RANGE_SAMPLES`` choice feeds (a
subsample of ``RANGE_VALUES`` values per feed and tensor): the clip is chosen on those, as the
calibration takes its ranges from all the choice rows.

- requires: a ``measure`` callable that quantizes (with the given keyword arguments on top of
  the user's recipe), converts and measures on the choice samples only;
- ensures: the ``Recipes`` returned is never worse on the choice samples than the base it was
  measured against (it is the base itself when nothing helped).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.tune.agreement import Agreement
from mrvl_convert.tune.prefix_search import noise
from mrvl_convert.verify.quant_report import LayerQuality

RECIPE_LAYERS = 16     # candidate layers each per-layer recipe is tried on
RANGE_SAMPLES = 16     # float feeds the MSE range choice looks at
RANGE_VALUES = 4096    # values per feed and tensor it keeps
CLIPS = tuple(np.round(np.linspace(1.0, 0.3, 15), 3))  # shares of absmax tried


@dataclass(frozen=True)
class Recipes:
    """What the trials quantize with on top of the user's recipe: model-wide switches (None:
    the user's), the Conv nodes whose biases are corrected, activation ranges by tensor."""

    equalize: Optional[bool] = None
    bias_correction: Optional[bool] = None
    bias_nodes: Tuple[str, ...] = ()
    ranges: Tuple[Tuple[str, float], ...] = ()

    def kwargs(self, tmp: Path) -> Dict[str, object]:
        """``quantize_int8``'s keyword arguments; an equalized model gets its own ranges
        file (its activations differ, and the calibration cache is not keyed by model)."""
        out: Dict[str, object] = {"bias_nodes": list(self.bias_nodes),
                                  "activation_ranges": dict(self.ranges)}
        if self.bias_correction is not None:
            out["bias_correction"] = self.bias_correction
        if self.equalize is not None:
            out["equalize"] = self.equalize
            if self.equalize:
                out["ranges"] = tmp / "ranges_equalized.json"
        return out

    def joined(self, other: "Recipes") -> "Recipes":
        return replace(self, bias_nodes=tuple(dict.fromkeys(self.bias_nodes + other.bias_nodes)),
                       ranges=tuple(dict(self.ranges + other.ranges).items()))

    def to_dict(self) -> Dict[str, object]:
        return {"equalize": self.equalize, "bias_correction": self.bias_correction,
                "bias_nodes": list(self.bias_nodes), "activation_ranges": dict(self.ranges)}


@dataclass
class Choice:
    """A recipe tried: the layer (or ``model`` for a model-wide one), its name, the output SNR
    (dB) on the choice samples with it, and whether it is in the recipes kept."""

    layer: str
    recipe: str
    recipes: Recipes
    output_snr_db: Optional[float]
    agreement: Optional[float]
    gain: float
    kept: bool = False
    key: Tuple[float, float] = field(default=(-1.0, 0.0), compare=False)

    def to_dict(self) -> Dict[str, object]:
        return {"layer": self.layer, "recipe": self.recipe, "output_snr_db": self.output_snr_db,
                "agreement": self.agreement, "gain": self.gain, "kept": self.kept}


Measure = Callable[[Recipes], Agreement]


def model_wide(base: Recipes, user: Mapping[str, bool], first: Agreement, measure: Measure
               ) -> Tuple[Recipes, Agreement, List[Choice]]:
    """The best of the user's recipe (``first`` measured) and equalization or bias correction
    of every Conv added to it (those the user did not ask for)."""
    best, best_got, tried = base, first, []
    for name in ("equalize", "bias_correction"):
        if user.get(name):
            continue
        recipes = replace(base, **{name: True})
        got = measure(recipes)
        tried.append(_choice("model", name, recipes, got, first))
        if got.key() > best_got.key():
            best, best_got = recipes, got
    for choice in tried:
        choice.kept = choice.recipes == best
    return best, best_got, tried


def per_layer(rows: Sequence[LayerQuality], base: Recipes, first: Agreement, measure: Measure,
              ranges: Mapping[str, float], bias_done: bool, convs: Sequence[str],
              limit: int = RECIPE_LAYERS) -> Tuple[Recipes, List[Choice]]:
    """Per-layer recipes on ``base`` (``first`` measured; module docstring): the recipes
    kept and every recipe tried."""
    tried: List[Choice] = []
    best_of: List[Choice] = []
    for row in rows[:limit]:
        options = _layer_options(row, ranges, bias_done, convs)
        got = [_choice(row.layer, name, base.joined(r), measure(base.joined(r)), first)
               for name, r in options]
        tried += got
        gaining = [c for c in got if c.gain > 0]
        if gaining:
            best_of.append(max(gaining, key=lambda c: c.gain))
    if not best_of:
        return base, tried
    single = max(best_of, key=lambda c: c.key)
    chosen, chosen_key = [single], single.key
    if len(best_of) > 1:
        together = measure(_joined(base, best_of))
        if together.key() > single.key:
            chosen, chosen_key = best_of, together.key()
    if chosen_key <= first.key():
        return base, tried
    for c in chosen:
        c.kept = True
    return _joined(base, chosen), tried


def _joined(base: Recipes, choices: Sequence[Choice]) -> Recipes:
    out = base
    for c in choices:
        out = out.joined(c.recipes)
    return out


def _choice(layer: str, name: str, recipes: Recipes, got: Agreement, base: Agreement) -> Choice:
    return Choice(layer, name, recipes, got.snr_db, got.value,
                  noise(base.snr_db) - noise(got.snr_db), key=got.key())


def _layer_options(row: LayerQuality, ranges: Mapping[str, float], bias_done: bool,
                   convs: Sequence[str]) -> List[Tuple[str, Recipes]]:
    options = []
    conv = [n for n in row.op_nodes if n in convs]
    if conv and not bias_done:
        options.append(("bias_correction", Recipes(bias_nodes=tuple(conv))))
    if row.tensor in ranges:
        options.append(("range_mse", Recipes(ranges=((row.tensor, ranges[row.tensor]),))))
    return options


def mse_ranges(float_model: Path, feeds: Sequence[Mapping[str, np.ndarray]],
               tensors: Sequence[str], samples: int = RANGE_SAMPLES) -> Dict[str, float]:
    """Per float tensor, the absmax whose symmetric int8 quantize-dequantize error on its
    values (over the first ``samples`` feeds) is least, where that is below the observed
    absmax (a tensor whose best clip is its whole range is left out)."""
    values = _tensor_values(float_model, feeds[:samples], tensors)
    out = {}
    for name, v in values.items():
        top = float(np.abs(v).max()) if v.size else 0.0
        if top <= 0.0:
            continue
        errors = [_qdq_error(v, top * c) for c in CLIPS]
        best = int(np.argmin(errors))
        if CLIPS[best] < 1.0 and errors[best] < errors[0]:
            out[name] = float(top * CLIPS[best])
    return out


def _qdq_error(values: np.ndarray, absmax: float) -> float:
    scale = absmax / 127.0
    return float(((np.clip(np.round(values / scale), -127, 127) * scale - values) ** 2).sum())


def _tensor_values(float_model: Path, feeds: Sequence[Mapping[str, np.ndarray]],
                   tensors: Sequence[str]) -> Dict[str, np.ndarray]:
    """A fixed subsample of each tensor's values on each feed, by onnxruntime (one run a
    feed); the sample's largest magnitude is always kept, so absmax is the observed one."""
    import onnx
    import onnxruntime as ort
    from onnx import helper
    proto = onnx.load(str(float_model))
    known = {o.name for o in proto.graph.output}
    proto.graph.output.extend(helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None)
                              for t in tensors if t not in known)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [t for t in tensors]
    rng = np.random.default_rng(0)
    kept: Dict[str, List[np.ndarray]] = {t: [] for t in names}
    for feed in feeds:
        for name, value in zip(names, session.run(names, dict(feed))):
            flat = np.asarray(value, np.float64).reshape(-1)
            pick = rng.choice(flat.size, min(flat.size, RANGE_VALUES), replace=False)
            kept[name] += [flat[pick], flat[[int(np.abs(flat).argmax())]]]
    return {t: np.concatenate(v) if v else np.zeros(0) for t, v in kept.items()}


__all__: List[str] = ["Choice", "Recipes", "model_wide", "mse_ranges", "per_layer",
                      "RECIPE_LAYERS"]
