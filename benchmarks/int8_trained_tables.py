"""The tables ``benchmarks/int8_trained.py`` prints: per model, each recipe and each search,
with the sample counts each figure is over."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).parent))
from int8_trained_figures import _se  # noqa: E402


def tables(results: List[Dict[str, object]]) -> str:
    lines = ["| model | recipe | held-out agreement (samples) | test agreement (samples) | "
             "on the sure ones | task accuracy fp32 -> int8 (drop, points) | "
             "int8 MAC share on Mrvl | Mrvl / CPU | time (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for row in r["recipes"]:
            lines.append(f"| {r['model']} | {row['recipe']} | {row['held_out']:.3f} "
                         f"({r['held_out']}) | {_test(r, row['agreement'])} | {_sure(r, row)} | "
                         f"{_task(r, row)} | {row['mrvl_mac_share']} | {row['mrvl']} / "
                         f"{row['cpu']} | {row['seconds']} |")
        for auto in r.get("keep_fp16_auto") or []:
            verdict = "reached" if auto["reached"] else "NOT reached"
            lines.append(
                f"| {r['model']} | search {auto['min_agreement']} {verdict}: "
                f"{len(auto['layers'])} layer(s) fp16, recipes {auto['recipes_kept']} | "
                f"{auto['held_out']:.3f} ({auto['held_out_samples']}; int8 alone "
                f"{auto['held_out_before']:.3f}) | {_test(r, auto['test_agreement'])} "
                f"(search's model {auto['search_model_test']:.3f}) | {_sure(r, auto)} | "
                f"{_task(r, auto)} | {auto['int8_mac_share']:.3f} | {auto['mrvl']} / "
                f"{auto['cpu']} | {auto['seconds']} |")
    for r in results:
        for auto in r.get("keep_fp16_auto") or []:
            steps = "; ".join(f"{s['prefix']} layer(s), {s['int8_mac_share']:.3f}: "
                              f"{s['agreement']:.3f} / {s['held_out']:.3f}"
                              for s in auto["curve"])
            lines.append(f"\n{r['model']} search {auto['min_agreement']}: curve (prefix, int8 "
                         f"MAC share: choice / held-out agreement): {steps or '-'}")
    for r in results:
        if r.get("sources"):
            choice, held, test = r["sources"]
            lines.append(f"\n{r['model']}: chosen on {choice}; held out: {held}; test: {test}"
                         f" ({r['calibrate']} calibration samples, {r['test']} test samples)")
    return "\n".join(lines)


def _test(result: Dict[str, object], value: float) -> str:
    se = f" ± {_se(value, result['test']):.3f}" if result["measure"] == "top1" \
        else f" ({result['measure']})"
    return f"{value:.3f}{se} ({result['test']})"


def _sure(result: Dict[str, object], row: Dict[str, object]) -> str:
    if row.get("confident_agreement") is None:
        return "-"
    return f"{row['confident_agreement']:.3f} (of {result['confident_samples']})"


def _task(result: Dict[str, object], row: Dict[str, object]) -> str:
    if row.get("task_accuracy") is None:
        return "-"
    fp32, int8 = result["fp32_task_accuracy"], row["task_accuracy"]
    return f"{fp32:.3f} -> {int8:.3f} ({100 * (fp32 - int8):+.1f})"
