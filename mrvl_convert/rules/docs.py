"""Human-readable views of a rule set: `mrvl-convert --list-rules` and docs/SUPPORTED_OPS.md."""
from __future__ import annotations

from typing import List, Sequence

from mrvl_convert.ir.match import Constraint, Rule


def _chain(rule: Rule) -> str:
    parts = []
    for step in rule.steps:
        ops = " or ".join(step.ops)
        parts.append(f"[{ops}]" if step.optional else ops)
    return " -> ".join(parts)


def list_rules_text(rules: Sequence[Rule]) -> str:
    lines: List[str] = []
    for rule in sorted(rules, key=lambda r: r.name):
        lines.append(f"{rule.name}  ->  {rule.layer}   ({rule.source}, priority {rule.priority})")
        lines.append(f"  pattern: {_chain(rule)}   ([..] = optional)")
        if rule.summary:
            lines.append(f"  {rule.summary}")
        if rule.note:
            lines.append(f"  report.json note: {rule.note}")
        for c in rule.constraints:
            lines.append(f"  - {c.describe()}: refused with \"{c.reason}\"")
    return "\n".join(lines) + "\n"


def supported_ops_markdown(rules: Sequence[Rule]) -> str:
    lines = [
        "# Supported ONNX ops",
        "",
        "Generated from `mrvl_convert/rules/builtin.yaml` and `rules/marvell/*.yaml` (layer set "
        "marvell) by `python -m mrvl_convert.rules.docs > docs/SUPPORTED_OPS.md`; a test keeps it "
        "in sync.",
        "Optional steps are in brackets. A node that fails a constraint stays on CPU, and",
        "`report.json` gives it the reason shown here.",
        "Before matching, what the input shapes (`--input-shape`) and pinned input values "
        "(`--input-value`) decide is computed: shape arithmetic (`Shape` with start/end too, the "
        "dynamo exporter's `sym_size_int`), and a `Range`, `ConstantOfShape`, `Expand` or `Tile` "
        "whose inputs fold, sized by them within the folding bounds (`frontend/sized_ops.py`); "
        "an `If` whose condition folds becomes the branch it chooses (`frontend/branches.py`). "
        "An `If`, `Loop` or `Scan` left runs on CPU, and `report.json` says why.",
        "Weight-only int8 weights (`Cast(int8) -> Mul(scale)`, or the `DequantizeLinear` of an "
        "int8 initializer in a model that quantizes no activation) are folded into the float "
        "weights onnxruntime computes, exactly: an fp16 conversion sees float layers "
        "(`frontend/qdq.py`).",
        "A ViT's class token is rewritten before matching: a Concat of constant tokens before or "
        "after [B, T, C] on the token axis becomes Unsqueeze, a 1x1 Conv padding the rows, "
        "Squeeze and an Add of the tokens; a Gather of one token becomes Slice and Squeeze "
        "(`frontend/token_forms.py`).",
        "A packed Q/K/V head split through 5-D tensors (Reshape to [B, N, 3, H, d], Transpose "
        "[2, 0, 3, 1, 4], Slice and Squeeze of each piece, as PaddlePaddle exports attention) "
        "becomes, per piece, a Slice of the last axis, Reshape to [B, N, H, d] and Transpose "
        "[0, 2, 1, 3], exactly (`frontend/packed_qkv.py`).",
        "A pre-norm LayerNorm's scale and shift (the Mul and Add of the decomposed form, or the "
        "LayerNormalization op's Scale and B) are folded into the MatMul / Gemm FCs that alone "
        "read it, W' = gamma * W and b' = b + beta @ W, before matching (`frontend/fc_folds.py`).",
        "A power-of-two attention scale (Mul or Div of Q.K^T, or torch SDPA's Mul of q and of k) "
        "is folded into the weight and bias of the FC computing Q (or K), exactly "
        "(`frontend/fc_folds.py`).",
        "A Concat the accelerator does not take (an ultralytics YOLOv8/YOLO11 head joining its "
        "scales on the anchor axis) moves past the layers after it that compute each position "
        "of its axis from that position alone (Split on another axis, Transpose, Reshape "
        "keeping the axis, Softmax on another axis, a 1x1 Conv, Sigmoid, a Q/DQ pair of one "
        "scale, ...), one copy per "
        "input; a Split of a Concat into the same pieces then reads them directly. The DFL and "
        "the Sigmoid stay with the convolutions, exactly (`frontend/concat_sinking.py`).",
        "Token-tensor ops as jax2tf and torch write them (`frontend/token_ops.py`): an Expand "
        "of an activation to a constant shape whose every reader is an Add, Sub, Mul or Div "
        "broadcasting to that shape is folded into them, exactly (any other reader: the Expand "
        "stays on CPU); a GlobalMaxPool of a 3-D [N, C, L] is a ReduceMax over axis 2 "
        "(mrvl.reduce_max; exact, but a NaN onnxruntime's GlobalMaxPool may skip propagates); "
        "a ReduceSum over the last axis of a 3-D float tensor is a MatMul by ones [L, 1] (an "
        "FC; float32 sums in another order, at most 2 (L - 1) 2**-24 sum |x| apart; other axes "
        "stay on CPU); a BatchNormalization of a 3-D [N, C, L] (BatchNorm1d over tokens) "
        "computes on its 4-D view [N, C, L, 1] between an Unsqueeze and a Squeeze, exactly, "
        "and maps as mrvl.channel_affine.",
        "1-D signal networks (`frontend/rank_lift.py`): a connected region of 3-D [N, C, L] "
        "tensors around a Conv, ConvTranspose, BatchNormalization or pool (and of 2-D [N, C] "
        "tensors around a BatchNormalization or a ReduceMean over C) computes on its 4-D view "
        "[N, C, 1, L] ([N, C, 1, 1]): Conv1d as Conv2d with a 1 x K kernel, its BN, pools, "
        "Concat, Split, Pad, Slice, ReduceMean and elementwise ops with their axes, pads and "
        "constants rewritten, one Unsqueeze where the region is entered and one Squeeze where "
        "it is left (a Squeeze then Unsqueeze of the same axes cancels), so the 3-D and 2-D "
        "rules' \"only 4-D tensors\" reasons no longer apply to them; a LayerNormalization of "
        "[N, C] computes on [N, 1, C]. Exact, except a ReduceMean over C of [N, C], which "
        "onnxruntime may sum in another order (at most 2 (C - 1) 2**-24 mean |x| apart). "
        "The 3-D GlobalMaxPool and BatchNormalization above are lifted this way first.",
        "Batchless models (`frontend/batchless_lift.py`, `rules/batch_axis.py`): an input "
        "whose axis 0 every reader first moves behind a new leading axis (Unsqueeze(axes=[0]), "
        "a Reshape adding a leading 1: madmom's [frames, bins]) is one sample, so the model's "
        "batch is 1 and its frames are no batch; the [H, W, C] tensors between its Conv "
        "wrappers (Squeeze(0) ... Unsqueeze(0)) compute on [1, H, W, C], a Pad there moved past "
        "the Transpose into the Conv it feeds. Exact.",
        "The variance E[x^2] - E[x]^2 (ReduceMean(x * x) - ReduceMean(x)^2 over the same axes, "
        "keeping them; flax's LayerNorm), which cancels in fp16 where the mean is large next to "
        "the spread, becomes E[(x - E[x])^2], reusing the model's x - E[x]: exact in real "
        "arithmetic, in float32 within (4 C + 11) 2**-24 E[x^2] of the original "
        "(`frontend/variance_form.py`).",
        "A one-hot of integer ids (jax2tf's Equal against a constant range, then Cast) stays on "
        "CPU before the accelerator stage, as an embedding lookup by ids does: no layer "
        "compares, and int tensors have no carrier in the artifact.",
        "An attention mask's constant below fp16's range (current transformers' "
        "`(1 - mask) * finfo(float32).min`, or its `masked_fill` as a Where) is clamped to "
        "-32752 when the Mul's or Where's output is only added to Softmax inputs: the weights "
        "are the same, bit for bit in float32, while every masked score is less than 32648 "
        "above its row's largest unmasked one (e.g. all scores within +-16300); -32752, not "
        "-65504, so a masked score plus it stays finite in fp16; a row with every position "
        "masked gets softmax(scores - 32752) in float32, as a -10000 mask gives "
        "softmax(scores - 10000), instead of uniform weights (`frontend/mask_constants.py`).",
        "A linear Resize (or opset 7-9 Upsample) of a 4-D float tensor in coordinate mode "
        "half_pixel, pytorch_half_pixel, asymmetric or align_corners, outside an int8 region, "
        "maps as layers: at integer factors (align_corners: n to (n - 1) k + 1 samples) as "
        "nearest upsampling (mrvl.resize2d), a depthwise box-filter Conv and a Mul by a "
        "constant correcting the edges (`frontend/linear_resize.py`); at any other size as "
        "MatMuls by its interpolation matrices along W and H with transposes between "
        "(`frontend/resize_matrices.py`). Both are exact in real arithmetic (their float32 "
        "bounds are in those modules); cubic, tf_crop_and_resize, 5-D and antialiased ones "
        "stay on CPU with the reason.",
        "A Pad no Conv absorbs (`frontend/pad_forms.py`), of a 2-D to 4-D float activation "
        "outside an int8 region (inside one: reflect and edge as below, as fp16 layers between "
        "the region's quant layers; a zero Pad reaching its Conv through QDQ pairs, Unsqueezes, "
        "Transposes or unit-axis Reshapes folds into the Conv, `frontend/qdq_pads.py`), "
        "in constant (any value), reflect or edge mode, maps as layers "
        "on its 4-D view, after moving past the Unsqueeze and Transpose nodes that alone read "
        "it (`frontend/pad_sinking.py`; next to a Conv it then folds into it): negative pads "
        "as a Slice (mrvl.strided_slice), channel pads as a 1x1 Conv by the 0/1 selection of "
        "the channels (a constant value as the bias), zero H/W pads as a depthwise 1x1 Conv of "
        "weight 1 with those pads (another value: plus an Add of the border constant), reflect "
        "and edge H/W pads as MatMuls by 0/1 selection matrices along W and H with transposes "
        "between; a -inf Pad of H and W that a MaxPool alone reads as the MaxPool's own "
        "padding. Exact for finite inputs (but for the sign of a zero); a Pad of the batch "
        "axis, of rank 1 or 5+, in wrap mode, with a value beyond float16's range (outside "
        "the MaxPool case) or with pads computed at run time stays on CPU with the reason.",
        "A batchless region (above) may end at a ReduceMean over H and W of its [H, W, C] "
        "(madmom's global pool): a Transpose to [1, C, H, W], the mean over H and W, and a "
        "Squeeze(0), exact in real arithmetic (summed in another order: at most 2 (H W - 1) "
        "2**-24 mean |x| apart).",
        "",
        "| composite | Marvell layer | ONNX pattern | summary |",
        "|---|---|---|---|",
    ]
    ordered = sorted(rules, key=lambda r: r.name)
    for rule in ordered:
        lines.append(f"| `{rule.name}` | `{rule.layer}` | {_chain(rule)} | "
                     f"{_escape(rule.summary)} |")
    lines.append("")
    generic = _generic_constraints(ordered)
    if generic:
        lines += ["## Generic constraints", "",
                  "Checked on the first required step of every composite, before its own "
                  "constraints (a composite that opts out of one says so below).", "",
                  "| check | reason when it fails |", "|---|---|"]
        lines += [f"| {_check(c)} | {_escape(c.reason)} |" for c in generic]
        lines.append("")
    for rule in ordered:
        lines.append(f"## `{rule.name}`")
        lines.append("")
        lines.append(f"Pattern: {_chain(rule)} → `{rule.layer}`")
        lines.append("")
        if rule.note:
            lines += [f"report.json notes on each node it takes: {rule.note}.", ""]
        skipped = [c.check for c in generic
                   if not any(o.generic and o.check == c.check for o in rule.constraints)]
        if skipped:
            lines += [f"Opts out of the generic constraints {', '.join(skipped)}.", ""]
        lines.append("| on | check | reason when it fails |")
        lines.append("|---|---|---|")
        for c in rule.constraints:
            if not c.generic:
                lines.append(f"| {c.role} | {_check(c)} | {_escape(c.reason)} |")
        lines.append("")
    return "\n".join(lines)


def _generic_constraints(rules: Sequence[Rule]) -> List[Constraint]:
    found: List[Constraint] = []
    for rule in rules:
        for c in rule.constraints:
            if c.generic and all(f.check != c.check for f in found):
                found.append(c)
    return found


def _check(c: Constraint) -> str:
    args = ", ".join(f"{k}={v}" for k, v in c.args.items() if k != "limit")
    return f"`{c.check}({args})`" if args else f"`{c.check}`"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":  # pragma: no cover - documentation generator
    from mrvl_convert.rules.loader import load_rules
    print(supported_ops_markdown(load_rules()), end="")
