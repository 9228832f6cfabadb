"""An Einsum equation read into letters per operand, and the plan of its MatMul form.

Requires: the operands' static shapes.
Ensures: ``read_equation`` gives one letter per axis of each operand and of the output (an
ellipsis made fresh letters, right-aligned as onnxruntime broadcasts them; an implicit output
the letters used once, in alphabetical order, after the ellipsis), or why the forms refuse it:
a letter repeated within one operand (a diagonal), a letter whose sizes differ between operands
(a broadcast of a size-1 axis), more than two operands. ``matmul_plan`` splits the letters of
two operands into the roles the MatMul form gives them (``einsum_forms.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple, Union

_FRESH = "0123456789"  # never an equation letter (ONNX takes [a-zA-Z]): the ellipsis axes


@dataclass(frozen=True)
class Equation:
    """Letters per operand and of the output, and every letter's size."""
    inputs: Tuple[str, ...]
    output: str
    sizes: Dict[str, int]


@dataclass(frozen=True)
class MatMulPlan:
    """Two operands' letters by role (each list in the order the form lays them out).

    ``lead``: the MatMul's leading (broadcast) axes, in output order: the letters both operands
    keep, and the output's first letter when only the first operand has it and others like it
    remain (the model's batch stays axis 0); ``rows``/``cols``: the other letters only the
    first/second operand keeps, merged into the MatMul's rows/columns; ``inner``: the letters
    summed over both, merged into its inner axis; ``own``: per operand, the letters only it has
    and the output drops (a ReduceSum first)."""
    lead: Tuple[str, ...]
    rows: Tuple[str, ...]
    cols: Tuple[str, ...]
    inner: Tuple[str, ...]
    own: Tuple[Tuple[str, ...], Tuple[str, ...]]


class _Refused(Exception):
    """Why the forms do not take an equation (``read_equation`` returns the message)."""


def read_equation(equation: str, shapes: Sequence[Sequence[int]]) -> Union[Equation, str]:
    """The equation on operands of ``shapes``, or why the forms do not take it."""
    try:
        letters, output = _letters(equation.replace(" ", ""), shapes)
    except _Refused as refused:
        return str(refused)
    return _checked(letters, output, shapes)


def _letters(text: str, shapes: Sequence[Sequence[int]]) -> Tuple[Tuple[str, ...], str]:
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes) or not 1 <= len(terms) <= 2:
        raise _Refused(f"{len(shapes)} operands; the forms take one or two")
    width = max((len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)
                 if "..." in t), default=0)
    ellipsis = _FRESH[:max(width, 0)]
    letters = tuple(_spell(term, len(shape), ellipsis) for term, shape in zip(terms, shapes))
    if arrow:
        return letters, _spell(rhs, len(ellipsis) * ("..." in rhs) + len(rhs.replace(
            "...", "")), ellipsis)
    if any(c.isupper() for c in lhs):
        raise _Refused("an implicit output with upper-case letters (whose order the forms do "
                       "not fix)")
    joined = "".join(letters)
    return letters, ellipsis + "".join(sorted(c for c in set(joined)
                                              if c.isalpha() and joined.count(c) == 1))


def _spell(term: str, rank: int, ellipsis: str) -> str:
    """``term`` with its ellipsis as the last ``rank - letters`` fresh letters."""
    named = term.replace("...", "")
    if named and not named.isalpha():
        raise _Refused(f"the term {term!r} holds a character that is no letter")
    if "..." not in term:
        if len(named) != rank:
            raise _Refused(f"the term {term!r} names {len(named)} axes of a rank-{rank} "
                           f"operand")
        return named
    extra = rank - len(named)
    if extra < 0 or extra > len(ellipsis):
        raise _Refused(f"the term {term!r} does not fit its rank-{rank} operand")
    return term.replace("...", ellipsis[len(ellipsis) - extra:])


def _checked(letters: Tuple[str, ...], output: str,
             shapes: Sequence[Sequence[int]]) -> Union[Equation, str]:
    sizes: Dict[str, int] = {}
    for term, shape in zip(letters, shapes):
        if len(set(term)) != len(term):
            return f"the term {term!r} repeats a letter (a diagonal), which the forms do not take"
        for letter, size in zip(term, shape):
            if sizes.setdefault(letter, int(size)) != int(size):
                return f"the letter {letter!r} has sizes {sizes[letter]} and {size} (a " \
                       f"broadcast), which the forms do not take"
    if len(set(output)) != len(output) or any(c not in sizes for c in output):
        return f"the output {output!r} repeats a letter or names one no operand has"
    return Equation(letters, output, sizes)


def matmul_plan(eq: Equation) -> MatMulPlan:
    """The roles of the letters of a two-operand equation (``MatMulPlan``)."""
    a, b = eq.inputs
    out = eq.output
    rows: List[str] = [c for c in out if c in a and c not in b]
    hoisted = rows[:1] if len(rows) >= 2 and out[0] == rows[0] else []
    lead = tuple(c for c in out if (c in a and c in b) or c in hoisted)
    return MatMulPlan(
        lead=lead, rows=tuple(c for c in rows if c not in hoisted),
        cols=tuple(c for c in out if c in b and c not in a),
        inner=tuple(c for c in a if c in b and c not in out),
        own=(tuple(c for c in a if c not in b and c not in out),
             tuple(c for c in b if c not in a and c not in out)))


def size_of(eq: Equation, letters: Sequence[str]) -> int:
    """The product of the letters' sizes (1 for none)."""
    total = 1
    for c in letters:
        total *= eq.sizes[c]
    return total
