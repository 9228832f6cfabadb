"""What ``--keep-fp16 auto`` found (``tune/keep_fp16.py``): the layers given back to fp16, the
per-layer recipes kept int8 layers got (``tune/layer_recipes.py``), the figures on the choice
and held-out samples, and the line and manifest entry that state them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional

from mrvl_convert.quantize.recipe import Quantization
from mrvl_convert.tune.agreement import describe
from mrvl_convert.tune.layer_recipes import Choice, Recipes
from mrvl_convert.tune.prefix_search import Point, Ranked
from mrvl_convert.verify.quant_analysis import QuantAnalysis


@dataclass
class Round:
    """A layer ``auto`` gave back to fp16 and the float-model nodes it is made of. With a
    target (a layer of the chosen prefix): its multiply-accumulates and its measured
    sensitivity, the output SNR on the choice samples with it alone in fp16."""

    layer: str
    layer_name: str
    isolated_snr_db: float
    nodes: List[str]
    accepted: bool = True
    macs: int = 0
    output_snr_db: Optional[float] = None


@dataclass
class KeepFp16Result:
    """The QDQ model written, the float-model nodes left in float, the ``auto`` rounds and
    the analysis of the last conversion (``auto`` only). With a target: the figures of the
    int8 model alone (``*_before``) and of the kept one, on the choice samples
    (``agreement``) and the held-out ones (``held_out``, the verdict)."""

    model: Path
    kept: List[str]
    rounds: List[Round] = field(default_factory=list)
    analysis: Optional[QuantAnalysis] = None
    min_agreement: Optional[float] = None
    agreement_before: Optional[float] = None
    agreement: Optional[float] = None
    samples: int = 0
    stages_before: Dict[str, int] = field(default_factory=dict)
    stages_after: Dict[str, int] = field(default_factory=dict)
    held_out_before: Optional[float] = None
    held_out: Optional[float] = None
    held_out_samples: int = 0
    int8_mac_share_before: Optional[float] = None
    int8_mac_share: Optional[float] = None
    snr_db: Optional[float] = None
    # With a target: the calibration rows that calibrate ``model`` (the choice samples) and those
    # the held-out figure is measured on, as indices into the calibration data given.
    calibration_rows: List[int] = field(default_factory=list)
    held_out_rows: List[int] = field(default_factory=list)
    # With a target: the candidates as ranked (measured sensitivity) and every prefix tried.
    ranking: List[Ranked] = field(default_factory=list)
    curve: List[Point] = field(default_factory=list)
    # With a target: the recipes every trial and the model written quantize with (the user's,
    # or better ones the search measured), and each recipe tried.
    recipes: Recipes = field(default_factory=Recipes)
    recipe_trials: List[Choice] = field(default_factory=list)

    @property
    def reached(self) -> bool:
        """Whether the held-out agreement reaches ``min_agreement`` (False without one)."""
        return (self.min_agreement is not None and self.held_out is not None
                and self.held_out >= self.min_agreement)

    @property
    def added(self) -> List[Round]:
        return [r for r in self.rounds if r.accepted]

    def to_dict(self) -> Dict[str, object]:
        """What the target cost, for the manifest's ``quantization.keep_fp16_auto``."""
        return {"min_agreement": self.min_agreement, "reached": self.reached,
                "held_out": self.held_out, "held_out_before": self.held_out_before,
                "held_out_samples": self.held_out_samples,
                "agreement": self.agreement, "agreement_before": self.agreement_before,
                "samples": self.samples,
                "int8_mac_share": self.int8_mac_share,
                "int8_mac_share_before": self.int8_mac_share_before,
                "layers": [r.layer for r in self.added],
                "nodes": [n for r in self.added for n in r.nodes],
                "rounds": len(self.curve),
                "ranking": [r.to_dict() for r in self.ranking],
                "curve": [p.to_dict() for p in sorted(self.curve, key=lambda p: p.prefix)],
                "stages_before": dict(self.stages_before),
                "stages_after": dict(self.stages_after),
                "calibration_rows": list(self.calibration_rows),
                "held_out_rows": list(self.held_out_rows),
                "recipes": self.recipes.to_dict(),
                "recipe_trials": [c.to_dict() for c in self.recipe_trials]}

    def quantization(self, base: Quantization) -> Quantization:
        """``base`` (the user's) quantizing as the search's model does: its kept nodes and
        recipes (the rows and ``keep_fp16_auto`` are the caller's to set)."""
        from dataclasses import replace
        return with_recipes(replace(base, keep_fp16=tuple(self.kept)), self.recipes.to_dict())

    def recipes_text(self) -> str:
        """The recipes kept, per layer (``-``: the user's alone)."""
        return ", ".join(f"{c.layer} {c.recipe}" for c in self.recipe_trials if c.kept) or "-"

    def summary(self) -> str:
        """One line: the target, the held-out figure (the verdict) and the choice one, the
        layers kept, the int8 MAC share and the subgraphs."""
        if self.min_agreement is None:
            return ""
        nodes = ", ".join(n for r in self.added for n in r.nodes) or "none"
        share = "-" if self.int8_mac_share is None else f"{self.int8_mac_share:.3f}"
        return (f"{describe(self.held_out, self.min_agreement, self.reached)} on "
                f"{self.held_out_samples} held-out sample(s) (int8 alone "
                f"{_fmt(self.held_out_before)}); on the {self.samples} sample(s) that chose the "
                f"layers {_fmt(self.agreement)} (int8 alone {_fmt(self.agreement_before)}); "
                f"{len(self.added)} layer(s) kept in fp16 ({nodes}) of {len(self.ranking)} "
                f"ranked; recipes {self.recipes_text()} ({len(self.recipe_trials)} tried); "
                f"int8 MAC share {share}; subgraphs {_stages(self.stages_before)} -> "
                f"{_stages(self.stages_after)}; curve {self.curve_text()}")

    def curve_text(self) -> str:
        """Each prefix tried, by length: int8 MAC share -> held-out agreement."""
        points = sorted(self.curve, key=lambda p: p.prefix)
        return ", ".join(f"{p.prefix}: {_fmt(p.int8_mac_share)} -> {_fmt(p.held_out)}"
                         for p in points) or "-"


def _fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.4f}"


def _stages(counts: Mapping[str, int]) -> str:
    return f"{counts.get('mrvl', 0)} Mrvl / {counts.get('cpu', 0)} CPU"



def with_recipes(base: Quantization, recipes: Mapping[str, object]) -> Quantization:
    """``base`` with the recipes of a ``keep_fp16_auto`` manifest entry's ``recipes``
    (``Recipes.to_dict``; a switch that is None stays the user's)."""
    from dataclasses import replace
    equalize, bias = recipes.get("equalize"), recipes.get("bias_correction")
    return replace(base, equalize=base.equalize if equalize is None else bool(equalize),
                   bias_correction=base.bias_correction if bias is None else bool(bias),
                   bias_nodes=tuple(recipes.get("bias_nodes") or ()),
                   activation_ranges=tuple(sorted(dict(recipes.get("activation_ranges")
                                                        or {}).items())))


__all__: List[str] = ["KeepFp16Result", "Round", "with_recipes"]
