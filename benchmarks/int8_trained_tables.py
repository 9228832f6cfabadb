"""The tables ``benchmarks/int8_trained.py`` prints: per model and recipe, and per search."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).parent))
from int8_trained_figures import _se  # noqa: E402


def tables(results: List[Dict[str, object]]) -> str:
    lines = ["| model | recipe | agreement with fp32 (held out) | on the sure ones | "
             "task accuracy fp32 -> int8 (drop, points) | Mrvl / CPU subgraphs | "
             "MACs int8 on Mrvl | time (s) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        for row in r["recipes"]:
            se = f" ± {_se(row['agreement'], r['test']):.3f}" if r["measure"] == "top1" \
                else f" ({r['measure']})"
            lines.append(f"| {r['model']} | {row['recipe']} | {row['agreement']:.3f}{se} | "
                         f"{_sure(r, row)} | {_task(r, row)} | "
                         f"{row['mrvl']} / {row['cpu']} | {row['mrvl_mac_share']} | "
                         f"{row['seconds']} |")
    lines += ["", "| model | target | held-out half (search) | test samples | on the sure ones | "
              "task accuracy | int8 MAC share | layers kept | "
              "curve: prefix, int8 MAC share: choice / held-out agreement | time (s) |",
              "|---|---|---|---|---|---|---|---|---|---|"]  # test: the written artifact (the search's)
    for r in results:
        auto = r.get("keep_fp16_auto")
        if not auto:
            continue
        steps = "; ".join(f"{s['prefix']} layer(s), {s['int8_mac_share']:.3f}: "
                          f"{s['agreement']:.3f} / {s['held_out']:.3f}" for s in auto["curve"])
        lines.append(f"| {r['model']} | {auto['min_agreement']} "
                     f"{'reached' if auto['reached'] else 'NOT reached'} | "
                     f"{auto['held_out']:.3f} (int8 alone {auto['held_out_before']:.3f}) | "
                     f"{auto['test_agreement']:.3f} ({auto['search_model_test']:.3f}) | "
                     f"{_sure(r, auto)} | {_task(r, auto)} | {auto['int8_mac_share']:.3f} | "
                     f"{len(auto['layers'])} | {steps} | {auto['seconds']} |")
    for r in results:
        if r.get("sources"):
            choice, held, test = r["sources"]
            lines.append(f"\n{r['model']}: the search chooses on {choice}, judges on {held} "
                         f"(the recipes and the written artifact calibrate on both); test: {test}")
    return "\n".join(lines)


def _sure(result: Dict[str, object], row: Dict[str, object]) -> str:
    if row.get("confident_agreement") is None:
        return "-"
    return f"{row['confident_agreement']:.3f} (of {result['confident_samples']})"


def _task(result: Dict[str, object], row: Dict[str, object]) -> str:
    if row.get("task_accuracy") is None:
        return "-"
    fp32, int8 = result["fp32_task_accuracy"], row["task_accuracy"]
    return f"{fp32:.3f} -> {int8:.3f} ({100 * (fp32 - int8):+.1f})"
