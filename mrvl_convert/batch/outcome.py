"""What happened to each model of a batch: an ``Outcome`` per model, a ``BatchResult`` per run."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

OK, VERIFY_FAILED, FAILED, SKIPPED = "ok", "verify_failed", "failed", "skipped"
# The counts of report.json's summary an Outcome carries (summary.json's columns).
COUNT_KEYS = ("nodes", "mrvl_nodes", "cpu_nodes", "removed_nodes", "mrvl_subgraphs",
              "cpu_subgraphs", "transitions")


@dataclass(frozen=True)
class Outcome:
    """What happened to one model. ``status``: ``ok``, ``verify_failed`` (converted, verify
    failed), ``failed`` (not converted) or ``skipped`` (fail-fast)."""
    model: str
    name: str
    status: str
    out_dir: str
    counts: Dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    error: Optional[str] = None
    error_type: Optional[str] = None
    traceback: Optional[str] = None          # only for internal errors (bugs), never user errors
    ignored_shapes: Tuple[str, ...] = ()     # shape overrides this model had no input for
    verified: Optional[bool] = None
    verify_note: Optional[str] = None       # compare()'s one-line verdict when verify ran
    verify: Optional[Dict[str, Any]] = None  # verify's figures (summary.json "verify")
    mrvl_mac_share: Optional[float] = None
    cut_by: Tuple[Tuple[str, int], ...] = ()  # op types left on CPU, most nodes first
    device: Optional[Dict[str, Any]] = None  # the device check (estimate.device.device_row)
    # MAC shares int8 / fp16 on the accelerator and on the CPU (report.json precision.shares)
    mac_shares: Optional[Dict[str, float]] = None
    codegen: Optional[Dict[str, Any]] = None  # the codegen it needs (manifest.json codegen)
    # What the CLI warns of, from the manifest as this run wrote it (another run may replace
    # the directory before the CLI reads it): input_shape_overrides, calibration_warnings.
    notices: Dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def converted(self) -> bool:
        """The artifact directory was written (ok, or converted but verify failed)."""
        return self.status in (OK, VERIFY_FAILED)

    @property
    def internal(self) -> bool:
        """True when the failure is a bug in mrvl_convert rather than a problem with the model."""
        return self.traceback is not None


class BatchResult(List[Outcome]):
    """The outcomes of a batch, in input order."""

    @property
    def ok(self) -> List[Outcome]:
        return [o for o in self if o.status == OK]

    @property
    def failed(self) -> List[Outcome]:
        """Models not converted (a verify failure is not one: see ``verify_failed``)."""
        return [o for o in self if o.status == FAILED]

    @property
    def verify_failed(self) -> List[Outcome]:
        """Models converted whose verify found an output outside its tolerance."""
        return [o for o in self if o.status == VERIFY_FAILED]

    @property
    def skipped(self) -> List[Outcome]:
        return [o for o in self if o.status == SKIPPED]

    @property
    def all_ok(self) -> bool:
        return all(o.ok for o in self)
