"""The second reference of an int8 verify: what quantization costs against the fp32 model.

An int8 artifact is judged against the QDQ model it was converted from (onnxruntime running it
as written): that verdict says whether the conversion is exact, and says nothing of what
quantizing lost, since the QDQ model carries the same loss. So every int8 verify also runs the
fp32 model the QDQ model was quantized from on the same inputs and reports, per output, the
lowest cosine over the samples, the SNR (dB) over all of them, the share of rows whose argmax
agrees (classifier-like ``[N, K]`` outputs) and the largest errors; an output with one value per sample
gets its error over its peak instead of a cosine (``output_kinds.py``: its cosine is +-1 whatever
the error). These figures are
information, not part of the verdict: the tolerances are for the conversion, and what loss a
user accepts from quantization is theirs to say.

An output whose lowest cosine against fp32 is below ``WRECKED_COSINE`` (one value per sample:
whose error over its peak is above ``ONE_VALUE_WRECKED``) is named as wrecked by int8 (``QuantCost.wrecked``), in the line and summary.json: an artifact exact against its QDQ
model passes the verdict, and that must not be the only word on a model int8 has ruined.

- requires: the fp32 model (path or ``ModelProto``) taking the artifact's inputs, and the
  hybrid's outputs on the feeds, per output name;
- ensures: a ``QuantCost`` with a row per output the fp32 model has, in the order given; a
  model whose inputs are not the artifact's raises ``ShapeError``.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx

from mrvl_convert.runtime.session import HybridSession
from mrvl_convert.runtime.stages import TensorSpec
from mrvl_convert.verify.metrics import Sums, Worst, snr_db, top1
from mrvl_convert.verify.output_kinds import ONE_VALUE_WRECKED, error_over_peak, one_value
from mrvl_convert.verify.reference import (check_model_inputs, load_model, model_label,
                                           reference_session, run_reference)


# Below this cosine against fp32 an output is not a noisy copy of fp32's but another tensor:
# int8 has wrecked it (issue 45: a face detector's output at cosine 0.0, status ok).
WRECKED_COSINE = 0.9


@dataclass
class CostRow:
    """One output against the fp32 model (``None``: not measured, ``note`` says why)."""

    tensor: str
    cosine: Optional[float] = None     # lowest over the samples
    snr_db: Optional[float] = None     # over every element of every sample
    top1: Optional[float] = None       # share of rows whose argmax agrees
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    note: str = ""
    over_peak: Optional[float] = None  # one value per sample: max error over peak |fp32|


@dataclass
class QuantCost:
    """What quantization costs, per output, against ``model`` (the fp32 model's label)."""

    model: str
    samples: int
    rows: List[CostRow] = field(default_factory=list)
    # the second reference: the fp32 model, or another quantizer's model as given (its
    # requantization's cost, ``frontend/foreign_kept.py``)
    against: str = "fp32"
    cost_of: str = "quantization"
    verdict: str = ""   # the model the verdict is against, when against is "given"

    def to_dict(self) -> Dict[str, Any]:
        """JSON has no infinity: an output equal to fp32 has SNR null and ``exact: true``."""
        rows = []
        for row in self.rows:
            out = {k: _finite(v) if isinstance(v, float) else v for k, v in asdict(row).items()}
            if row.snr_db == math.inf:
                out["exact"] = True
            rows.append(out)
        return {"model": self.model, "samples": self.samples, "outputs": rows,
                "wrecked": [r.tensor for r in self.wrecked], "against": self.against}

    @property
    def wrecked(self) -> List[CostRow]:
        """Outputs whose lowest cosine against fp32 is below ``WRECKED_COSINE``."""
        return [r for r in self.rows if _wrecked(r)]

    def warning(self) -> str:
        """'' or the sentence naming the outputs int8 wrecks, for the line and the table."""
        rows = self.wrecked
        if not rows:
            return ""
        named = ", ".join(_damage(r) for r in rows[:5])
        bound = (f"cosine below {WRECKED_COSINE:g}, or one value off by more than "
                 f"{ONE_VALUE_WRECKED:g} of its peak")
        if self.against != "fp32":
            return (f"warning: {self.cost_of} wrecks {named} against {self._words()} ({bound})"
                    f": the {self.cost_of}'s loss, not the conversion's; try --foreign-int8 fp16")
        return (f"warning: int8 wrecks {named} against fp32 ({bound}): the quantization's "
                "loss, not the conversion's; try --keep-fp16 auto, or calibration data like "
                "the real inputs")

    def _words(self) -> str:
        return "fp32" if self.against == "fp32" else "the model as given"

    def summary(self) -> str:
        """One clause for a batch log: the worst figures over the outputs."""
        cosines = [r.cosine for r in self.rows if r.cosine is not None]
        agree = [r.top1 for r in self.rows if r.top1 is not None]
        parts = [f"min cosine {min(cosines):.4f}"] if cosines else []
        parts += [f"top-1 agreement {min(agree):.4f}"] if agree else []
        spans = [r.over_peak for r in self.rows if r.over_peak is not None]
        parts += [f"one-value error/peak {max(spans):.4g}"] if spans else []
        parts += [f"max_rel {max(r.max_rel for r in self.rows if r.max_rel is not None):.3g}"] \
            if self.against != "fp32" and any(r.max_rel is not None for r in self.rows) else []
        text = (f"against {self._words()} (what {self.cost_of} costs): "
                + (", ".join(parts) or "not measured"))
        if self.against != "fp32":  # which of the two models the verdict is against
            text = f"verdict against {self.verdict}; {text}"
        return text + (f"; {self.warning()}" if self.wrecked else "")

    def format_lines(self) -> List[str]:
        """The table's section: a line per output."""
        model = "the fp32 model" if self.against == "fp32" else "the model as given,"
        lines = [f"against {model} {self.model} (what {self.cost_of} costs; "
                 f"information, not the verdict), over {self.samples} sample(s):"]
        for row in self.rows:
            first = (f"error/peak {row.over_peak:.4g}" if row.over_peak is not None
                     else f"min cosine {_fmt(row.cosine, '.6f')}")
            figures = [first, f"SNR {_fmt_snr(row.snr_db)}",
                       f"top-1 agreement {_fmt(row.top1, '.4f')}",
                       f"max_abs {_fmt(row.max_abs, '.3g')}", f"max_rel {_fmt(row.max_rel, '.3g')}"]
            lines.append(f"  {row.tensor}: " + ", ".join(figures) +
                         (f"  ({row.note})" if row.note else ""))
        return lines + ([self.warning()] if self.wrecked else [])


def quantization_cost(fp32_model: "str | os.PathLike[str] | onnx.ModelProto",
                      session: HybridSession, got: Mapping[str, Sequence[np.ndarray]],
                      feeds: Sequence[Mapping[str, np.ndarray]], log_severity: int = 3,
                      against: str = "fp32", cost_of: str = "quantization",
                      verdict: str = "") -> QuantCost:
    """The hybrid's outputs ``got`` (per output name, one array per feed) against the fp32
    model run on the same ``feeds`` (module docstring); ``against`` and ``cost_of`` say what
    that model is (``given``, ``requantization`` for another quantizer's model), ``verdict``
    the model the verdict is against then."""
    proto = load_model(fp32_model)
    label = model_label(fp32_model)
    check_model_inputs(proto, session, label)
    present = {o.name for o in proto.graph.output} | {o for n in proto.graph.node
                                                      for o in n.output}
    names = [n for n in got if n in present]
    reference = reference_session(proto, [TensorSpec(n, (), "float32") for n in names],
                                  log_severity)
    want: Dict[str, List[np.ndarray]] = {n: [] for n in names}
    for feed in feeds:
        for name, value in zip(names, run_reference(reference, names, dict(feed), proto)):
            want[name].append(np.asarray(value))
    rows = [_row(n, list(got[n]), want[n]) if n in want else
            CostRow(n, note="not a tensor of the fp32 model") for n in got]
    return QuantCost(label, len(feeds), rows, against, cost_of, verdict)


def _row(name: str, got: List[np.ndarray], want: List[np.ndarray]) -> CostRow:
    if any(g.shape != w.shape for g, w in zip(got, want)) or not want or \
            not np.issubdtype(want[0].dtype, np.floating):
        return CostRow(name, note="not compared: a shape or element type differs")
    worst, sums = Worst(), Sums()
    for g, w in zip(got, want):
        worst.add(g, w)
        sums.add(g, w)
    note = "" if worst.finite else "holds inf/NaN"
    if one_value(want):  # a cosine of +-1 says nothing: the error over the peak does
        return CostRow(name, None, snr_db(sums), None, worst.max_abs, worst.max_rel, note,
                       error_over_peak(got, want))
    return CostRow(name, worst.cosine, snr_db(sums), top1(got, want),
                   worst.max_abs, worst.max_rel, note)


def _wrecked(row: CostRow) -> bool:
    if row.over_peak is not None:
        return not row.over_peak <= ONE_VALUE_WRECKED
    return row.cosine is not None and not row.cosine >= WRECKED_COSINE


def _damage(row: CostRow) -> str:
    if row.over_peak is not None:
        return f"{row.tensor} (off by {row.over_peak:.3g} of its peak)"
    return f"{row.tensor} (cosine {row.cosine:.3f})"


def _finite(value: float) -> Optional[float]:
    return float(value) if math.isfinite(value) else None


def _fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _fmt_snr(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return "exact" if value == math.inf else f"{value:.1f} dB"
