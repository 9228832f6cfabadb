"""The recipes ``--keep-fp16 auto --min-agreement`` tries on each layer before it keeps any
layer in fp16 (issue 44): Marvell's int8 is fixed (per-tensor symmetric, no zero point), so
what can change is how each tensor is quantized; a layer mended that way stays int8 and costs
no MACs.

Per candidate layer (in their isolated-SNR order, at most ``RECIPE_LAYERS``), with **only that
layer int8** and every other node float (AIMET's "only this layer quantized" sensitivity, so a
layer elsewhere that int8 wrecks does not drown the figure), the model's output SNR on the
choice samples is measured with the user's recipe and with each recipe of the layer:

- ``bias_correction``: that layer's Conv bias corrected for its int8 weights' mean error
  (``quantize/bias_correct.py``, on that Conv alone);
- ``range_mse``: its output's symmetric int8 range clipped to the share of the observed absmax
  whose quantize-dequantize error on the layer's float output is least (``mse_ranges``).

A layer gets the recipe that removes most of its own output noise, where that is at least
``MIN_SHARE`` of it (less is within what the choice samples can tell apart); none otherwise.
The recipes kept are then used by every later trial (the fp16 ranking and the bisection), and
the model written. Cross-layer equalization acts on pairs of layers, not on one: the search
does not try it (``--equalize`` puts it in every trial).

The range choice measures the float outputs on at most ``RANGE_SAMPLES`` choice feeds (a
uniform subsample of ``RANGE_VALUES`` values per feed and tensor; the absmax is over all).

- requires: a ``measure`` callable that quantizes only the given layer (with the given recipes
  on top of the user's), converts and measures on the choice samples only;
- ensures: a layer's recipe removed at least ``MIN_SHARE`` of the output noise that layer alone
  adds, measured; every recipe tried is returned with its figures.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mrvl_convert.tune.agreement import Agreement
from mrvl_convert.tune.prefix_search import noise
from mrvl_convert.verify.quant_report import LayerQuality

RECIPE_LAYERS = 16     # candidate layers each per-layer recipe is tried on
MIN_SHARE = 0.1        # of a layer's own output noise a recipe must remove to be kept
RANGE_SAMPLES = 16     # float feeds the MSE range choice looks at
RANGE_VALUES = 4096    # values per feed and tensor it keeps
CLIPS = tuple(float(c) for c in np.round(np.geomspace(1.0, 0.05, 24), 4))  # shares of absmax


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
    """A recipe tried on a layer: its name, the output SNR (dB) and top-1 agreement on the
    choice samples with only that layer int8 with it (``alone_snr_db``: without it), the
    output noise it removes, and whether it is kept."""

    layer: str
    recipe: str
    recipes: Recipes
    output_snr_db: Optional[float]
    agreement: Optional[float]
    gain: float
    alone_snr_db: Optional[float] = None
    kept: bool = False

    def to_dict(self) -> Dict[str, object]:
        return {"layer": self.layer, "recipe": self.recipe, "output_snr_db": self.output_snr_db,
                "alone_snr_db": self.alone_snr_db, "agreement": self.agreement,
                "gain": self.gain, "kept": self.kept}


Measure = Callable[[LayerQuality, Recipes], Agreement]  # only that layer int8


def per_layer(rows: Sequence[LayerQuality], base: Recipes, measure: Measure,
              ranges: Mapping[str, float], bias_done: bool, convs: Sequence[str],
              limit: int = RECIPE_LAYERS) -> Tuple[Recipes, List[Choice]]:
    """Per-layer recipes on ``base`` (module docstring): the recipes kept (``base`` joined
    with each layer's) and every recipe tried."""
    tried: List[Choice] = []
    kept: List[Choice] = []
    for row in rows[:limit]:
        options = _layer_options(row, ranges, bias_done, convs)
        if not options:
            continue
        alone = measure(row, base)
        got = [_choice(row.layer, name, r, measure(row, base.joined(r)), alone)
               for name, r in options]
        tried += got
        best = max(got, key=lambda c: c.gain)
        if best.gain >= MIN_SHARE * noise(alone.snr_db) and best.gain > 0:
            best.kept = True
            kept.append(best)
    return _joined(base, kept), tried


def _joined(base: Recipes, choices: Sequence[Choice]) -> Recipes:
    out = base
    for c in choices:
        out = out.joined(c.recipes)
    return out


def _choice(layer: str, name: str, recipes: Recipes, got: Agreement, alone: Agreement
            ) -> Choice:
    return Choice(layer, name, recipes, got.snr_db, got.value,
                  noise(alone.snr_db) - noise(got.snr_db), alone.snr_db)


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
    tops, values = _tensor_values(float_model, feeds[:samples], tensors)
    out = {}
    for name, v in values.items():
        top = tops[name]
        if top <= 0.0 or not v.size:
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
                   tensors: Sequence[str]) -> "Tuple[Dict[str, float], Dict[str, np.ndarray]]":
    """Per tensor, its absmax over the feeds and a uniform subsample of its values (at most
    ``RANGE_VALUES`` a feed: an unbiased sample of the error each clip makes), by onnxruntime,
    one run a feed."""
    import onnx
    from mrvl_convert.quantize.bias_correct import probe_session
    names = list(dict.fromkeys(tensors))
    session = probe_session(onnx.load(str(float_model)), names)
    rng = np.random.default_rng(0)
    tops = {t: 0.0 for t in names}
    kept: Dict[str, List[np.ndarray]] = {t: [] for t in names}
    for feed in feeds:
        for name, value in zip(names, session.run(names, dict(feed))):
            flat = np.asarray(value, np.float64).reshape(-1)
            if not flat.size:
                continue
            tops[name] = max(tops[name], float(np.abs(flat).max()))
            kept[name].append(flat[rng.choice(flat.size, min(flat.size, RANGE_VALUES),
                                              replace=False)])
    return tops, {t: np.concatenate(v) if v else np.zeros(0) for t, v in kept.items()}


__all__: List[str] = ["Choice", "MIN_SHARE", "Recipes", "mse_ranges", "per_layer",
                      "RECIPE_LAYERS"]
