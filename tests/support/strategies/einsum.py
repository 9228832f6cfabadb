"""Hypothesis strategies: an Einsum of one or two operands (frontend/einsum_forms.py) whose
letters take every role the forms give them: kept by both operands (batch), by one (rows,
columns), summed over both (inner), summed in one only (own), in any order per operand and in
the output, sizes 1 to 4, sometimes an ellipsis over leading axes, an implicit output, or a
constant second operand (a weight); and the bound the forms state
(``2 gamma_n sum |products|`` per output)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import numpy_helper
from hypothesis import assume, strategies as st

from support.models import Builder, canonicalized, run_ort

# Which operands and the output hold a letter of each role (one operand: first, output).
ROLES_TWO = {"batch": "ABO", "rows": "AO", "cols": "BO", "inner": "AB", "own_a": "A",
             "own_b": "B"}
ROLES_ONE = {"kept": "AO", "own_a": "A"}
U = 2.0 ** -24


@dataclass(frozen=True)
class EinsumCase:
    equation: str
    shapes: Tuple[Tuple[int, ...], ...]
    const_b: bool
    seed: int

    def model(self, opset: int = 17) -> onnx.ModelProto:
        """x0 [, x1 or a weight] -> Einsum (named ``einsum``)."""
        b = Builder(seed=self.seed, opset=opset)
        names = [b.input("x0", list(self.shapes[0]))]
        if len(self.shapes) == 2:
            names.append(b.weight(*self.shapes[1], scale=1.0) if self.const_b
                         else b.input("x1", list(self.shapes[1])))
        return b.model([b.op("Einsum", names, name="einsum", equation=self.equation)])

    def feed(self) -> Dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed + 1)
        count = 1 if self.const_b else len(self.shapes)
        return {f"x{k}": (rng.standard_normal(self.shapes[k])
                          * 2.0 ** rng.integers(-4, 5, self.shapes[k])).astype(np.float32)
                for k in range(count)}


def sums_and_moves(term: str, output: str) -> bool:
    """One operand summed over some letters and the rest reordered (``ijk->ki``)."""
    kept = [c for c in term if c in output]
    return len(kept) < len(term) and "".join(kept) != output


@functools.lru_cache(maxsize=None)
def ort_sums_and_moves() -> bool:
    """Whether this onnxruntime runs ``ijk->ki``: 1.18's Einsum fails on one operand summed and
    reordered ("The candidate output does not match the actual output's shape"), so no such
    model runs there to compare with (the newest versions run it)."""
    b = Builder(seed=0, opset=17)
    x = b.input("x", [2, 3, 4])
    model = b.model([b.op("Einsum", [x], equation="ijk->ki")], shapes={"Einsum_1_out": [4, 2]})
    try:
        run_ort(model, {"x": np.ones((2, 3, 4), np.float32)}, optimize=False)
    except Exception:  # onnxruntime's own failure, whatever its type
        return False
    return True


def within_bound(case: EinsumCase, opset: int = 17):
    """Canonicalize the case's model, run both on onnxruntime and check every output is within
    ``bound``; the canonical graph and the canonical model's op types."""
    model = case.model(opset)
    canonical, proto = canonicalized(model)
    feed = case.feed()
    want = next(iter(run_ort(model, feed, optimize=False).values()))
    got = next(iter(run_ort(proto, feed, optimize=False).values()))
    assert got.shape == want.shape, (case, got.shape, want.shape)
    operands = [feed["x0"]] + ([numpy_helper.to_array(model.graph.initializer[0])]
                               if case.const_b else [feed[k] for k in feed if k != "x0"])
    excess = np.abs(got.astype(np.float64) - want) - bound(case.equation, operands, case.shapes)
    assert excess.max(initial=0.0) <= 0.0, (case, float(excess.max()))
    return canonical, [n.op_type for n in proto.graph.node]


def bound(equation: str, operands: List[np.ndarray], shapes) -> np.ndarray:
    """Per output, ``2 gamma_n sum |products|``: how far two orders of a sum of ``n`` float32
    products may differ (the forms' stated bound)."""
    n = int(np.einsum(equation, *[np.ones(s) for s in shapes]).max(initial=1))
    gamma = n * U / (1 - n * U)
    magnitude = np.einsum(equation, *[np.abs(x).astype(np.float64) for x in operands])
    return 2 * gamma * magnitude


@st.composite
def einsum_cases(draw, *, two: Optional[bool] = None) -> EinsumCase:
    two = draw(st.booleans()) if two is None else two
    roles = ROLES_TWO if two else ROLES_ONE
    count = draw(st.integers(1, 5))
    letters = draw(st.permutations("abcdefghijklmnopqrstuvwxyz"))[:count]
    role = {c: draw(st.sampled_from(sorted(roles))) for c in letters}
    if two and "inner" not in role.values() and draw(st.booleans()):
        role[letters[0]] = "inner"  # more MatMuls than Muls
    size = {c: draw(st.integers(1, 4)) for c in letters}
    terms = []
    for side in ("AB" if two else "A"):
        mine = [c for c in letters if side in roles[role[c]]]
        terms.append("".join(draw(st.permutations(mine))))
    output = "".join(draw(st.permutations([c for c in letters if "O" in roles[role[c]]])))
    assume(output and all(terms))  # no scalar: onnx's rank-0 tensors are another matter
    assume(two or not sums_and_moves(terms[0], output) or ort_sums_and_moves())
    equation, shapes = _spelled(draw, terms, output, size)
    return EinsumCase(equation, shapes, two and draw(st.booleans()), draw(st.integers(0, 99)))


def _spelled(draw, terms: List[str], output: str, size: Dict[str, int]):
    """The equation, with a shared leading batch letter as an ellipsis or the output implicit
    where that spells the same thing."""
    shapes = tuple(tuple(size[c] for c in term) for term in terms)
    shared = [c for c in output[:1] if all(t[:1] == c for t in terms)]
    if shared and draw(st.booleans()):
        lhs = ",".join("..." + t[1:] for t in terms)
        return f"{lhs}->...{output[1:]}", shapes
    joined = "".join(terms)
    implicit = "".join(sorted(c for c in set(joined) if joined.count(c) == 1))
    if output == implicit and draw(st.booleans()):
        return ",".join(terms), shapes
    return ",".join(terms) + "->" + output, shapes
