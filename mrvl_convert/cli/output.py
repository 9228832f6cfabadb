"""What ``mrvl-convert`` shows: the summary table, the cut lines and the progress display."""
from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Optional, Sequence, TextIO

from mrvl_convert.batch.outcome import Outcome

TABLE_COLUMNS = ("model", "status", "Mrvl nodes", "CPU nodes", "Mrvl subgraphs",
                 "CPU subgraphs", "cuts", "MACs on Mrvl", "codegen", "seconds", "error")
# The codegen column: the layer set whose codegen emits every Mrvl layer (manifest.json codegen).
CODEGEN_LABELS = {"upstream-0.19": "v0.19", "marvell": "marvell"}
# More Mrvl<->CPU transitions than this and the CLI names the op types that cut the model.
FEW_CUTS = 3


def format_table(result: Sequence[Outcome]) -> str:
    """The summary table: one row per model, columns as in TABLE_COLUMNS."""
    rows = [list(TABLE_COLUMNS)]
    for o in result:
        counts = [str(o.counts.get(k, "")) if o.counts else "-" for k in
                  ("mrvl_nodes", "cpu_nodes", "mrvl_subgraphs", "cpu_subgraphs", "transitions")]
        share = "-" if o.mrvl_mac_share is None else f"{100 * o.mrvl_mac_share:.1f}%"
        error = "" if o.ok else _short(o.error_type or o.status)
        if o.status == "verify_failed":
            error = _short(_first_failing_output(o) or "verify failed")
        codegen = CODEGEN_LABELS[o.codegen["layer_set"]] if o.codegen else "-"
        rows.append([o.name, o.status, *counts, share, codegen, f"{o.seconds:.2f}", error])
    widths = [max(len(r[i]) for r in rows) for i in range(len(TABLE_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def _first_failing_output(outcome: Outcome) -> Optional[str]:
    for row in (outcome.verify or {}).get("outputs", []):
        if not row["passed"]:
            return f"output {row['tensor']} over tolerance"
    return None


def cut_line(outcome: Outcome, out: Path) -> str:
    """'name: 12 cuts: Sigmoid x80, Mul x74; see OUT/name/report.json', for a model cut more
    than FEW_CUTS times; '' otherwise."""
    cuts = outcome.counts.get("transitions", 0) if outcome.counts else 0
    if cuts <= FEW_CUTS:
        return ""
    ops = ", ".join(f"{op} x{n}" for op, n in outcome.cut_by[:3])
    return f"{outcome.name}: {cuts} cuts: {ops}; see {out / outcome.name / 'report.json'}"


def codegen_line(outcome: Outcome, out: Path) -> str:
    """'name: needs the newer Marvell codegen for Sigmoid x2, Mul2D x1; ...' for a converted
    model with a layer beyond upstream TVM v0.19's kinds; '' otherwise."""
    codegen = outcome.codegen if outcome.converted else None
    if not codegen or not codegen["beyond_upstream"]:
        return ""
    beyond = codegen["beyond_upstream"]
    kinds = ", ".join(f"{k['kind']} x{k['layers']}" for k in beyond[:5])
    more = f" and {len(beyond) - 5} more" if len(beyond) > 5 else ""
    unemitted = ", ".join(f"{k['kind']} x{k['layers']}" for k in beyond
                          if k.get("no_public_codegen"))
    none = f"; no public codegen emits {unemitted} as such" if unemitted else ""
    return (f"{outcome.name}: needs the newer Marvell codegen (--layer-set marvell) for "
            f"{kinds}{more}: upstream TVM v0.19, which Marvell's released flow pins, emits none "
            f"of them{none}; see {out / outcome.name / 'manifest.json'} codegen")


def codegen_note(result: Sequence[Outcome]) -> str:
    """', 2 of them need only upstream TVM v0.19's codegen' for the run's last line: how many of
    the converted models the released flow's codegen would take whole."""
    needs = [o.codegen["layer_set"] for o in result if o.converted and o.codegen]
    if not needs:
        return ""
    only = needs.count("upstream-0.19")
    return f", {only} of them need{'s' if only == 1 else ''} only upstream TVM v0.19's codegen"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."



class _Progress:
    """A tqdm bar on a terminal, naming the model in work and its stage (convert, verify);
    otherwise one plain line per finished model on stdout."""

    def __init__(self, total: int, *, quiet: bool, stream: Optional[TextIO] = None,
                 tick_seconds: float = 1.0) -> None:
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.bar = None
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None
        if not quiet and self.stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="model", file=self.stream, dynamic_ncols=True)
            # tqdm redraws only on updates: a long model would freeze the elapsed time.
            self._ticker = threading.Thread(target=self._tick, args=(tick_seconds,),
                                            daemon=True)
            self._ticker.start()

    def _tick(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            bar = self.bar
            if bar is not None:
                bar.refresh()

    def stage(self, name: str, stage: str) -> None:
        """A model of this process starts a stage: the bar says so at once."""
        if self.bar is not None:
            self.bar.set_postfix_str(f"{name}: {stage}...", refresh=True)

    def update(self, outcome: Outcome) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{outcome.name}: {outcome.status}", refresh=False)
            self.bar.update(1)
        elif not self.quiet:
            self.stream.write(f"{outcome.status:<6} {outcome.name}  {outcome.model}  "
                              f"({outcome.seconds:.2f}s)\n")
            self.stream.flush()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
