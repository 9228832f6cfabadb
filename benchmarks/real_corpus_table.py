"""The real corpus' rows as Markdown tables: the fp16 conversions, then the int8 and foreign
int8 ones (``real_corpus.py`` says what each column is). A row with a ``note`` and no figures is
a model that did not convert (or fetch, or load): the note says why, in one line."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

Row = Dict[str, Any]
REASON_CHARS = 110


def _pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.0%}"


def _num(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return f"{value:.2g}" if value < 0.01 or value >= 100 else f"{value:.3f}"


def _yes(value: Optional[bool]) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _cut(row: Row) -> str:
    """The note (a failure) first, then the top CPU reasons, shortened."""
    parts = [row["note"]] if row.get("note") else []
    for reason in row.get("reasons", [])[:2]:
        parts.append(reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS] + "...")
    text = "; ".join(parts) or "-"
    return text.replace("|", "\\|")


def _verdict(row: Row) -> str:
    if "passed" not in row:
        return "-"
    if row["passed"]:
        return "PASS"
    failed = row.get("failed_outputs") or []
    # the model's own fp16 overflow (verify/fp16_overflow.py), not a converter defect
    overflow = row.get("overflow", "").split(", beyond")[0].replace(" in float32", "")
    return "FAIL" + (f" ({', '.join(failed[:2])})" if failed else "") + (
        f"; {overflow}" if overflow else "")


def fp16_line(row: Row) -> str:
    name = row["model"] + ("" if row["mode"] == "fp16" else " " + row["mode"][5:])
    cells = [name, row["package"], row.get("data", "")]
    if "mrvl" not in row:
        return "| " + " | ".join(cells + ["-"] * 8 + [_cut(row)]) + " |"
    cells += [f"{row['mrvl']} / {row['cpu']}", _pct(row.get("share")), _yes(row.get("fits")),
              _num(row.get("err")), _num(row.get("floor")), _verdict(row),
              _num(row.get("ratio")), _num(row.get("convert_s")), _cut(row)]
    return "| " + " | ".join(cells) + " |"


def int8_line(row: Row) -> str:
    cells = [row["model"], row["mode"]]
    if "mrvl" not in row:
        return "| " + " | ".join(cells + ["-"] * 10 + [_cut(row)]) + " |"
    wrecked = row.get("wrecked") or []
    agreement = _num(row.get("cosine")) + ("" if row.get("top1") is None
                                           else f" / {_num(row.get('top1'))}")
    cells += [f"{row['mrvl']} / {row['cpu']}", _pct(row.get("share")),
              _pct(row.get("int8_share")), _yes(row.get("fits")), _verdict(row), agreement,
              ", ".join(wrecked[:3]) or "-", _num(row.get("err")), _num(row.get("floor")),
              _num(row.get("ratio")), _cut(row)]
    return "| " + " | ".join(cells) + " |"


FP16_HEAD = ("| model | package | data | Mrvl / CPU subgraphs | MACs on Mrvl | fits one device "
             "| error / peak vs fp32 | fp16 floor | verify | convert / load+write | convert (s) "
             "| what cut it (top CPU reasons) or why not converted |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|---|")
INT8_HEAD = ("| model | int8 | Mrvl / CPU subgraphs | MACs on Mrvl | MACs in int8 | fits one "
             "device | verify vs QDQ | cosine / top-1 vs fp32 (worst output) | cosine < 0.9 "
             "(one value: error > 0.5 peak) "
             "| error / peak vs fp32 | fp16 floor | convert / load+write "
             "| what cut it or why not converted |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def tables(rows: Sequence[Row]) -> str:
    """The fp16 table, then (if any) the int8 table."""
    fp16 = [r for r in rows if r["mode"].startswith("fp16")]
    int8 = [r for r in rows if not r["mode"].startswith("fp16")]
    text = [FP16_HEAD] + [fp16_line(r) for r in fp16]
    if int8:
        text += ["", INT8_HEAD] + [int8_line(r) for r in int8]
    return "\n".join(text)


def counts(rows: Sequence[Row]) -> Dict[str, int]:
    """How many fp16 rows are whole (1 Mrvl subgraph, >= 90% of MACs), how many did not
    convert, and how many int8/foreign rows hit an internal error."""
    fp16 = [r for r in rows if r["mode"] == "fp16"]
    return {"models": len(fp16),
            "whole": sum(1 for r in fp16 if r.get("mrvl") == 1 and (r.get("share") or 0) >= 0.9),
            "not_converted": sum(1 for r in fp16 if "mrvl" not in r),
            "internal_errors": sum(1 for r in rows if "INTERNAL ERROR" in r.get("note", ""))}
