"""The float composites of a QDQ model read through its pairs: which chains the rules would fuse
into one float layer (a GELU, a LayerNorm...) were the quantizer's pairs inside them gone.

A quantizer that wraps every Mul and Add in Q/DQ (onnxruntime's ``quantize_static`` with its
default op types, others) also rounds tensors inside a composite: a GELU written
``(0.5 * x) * (1 + erf(x / sqrt 2))`` gets a pair after its ``0.5 * x`` Mul and after its gate
Mul, each of which has an int8 form of its own, so ``frontend/float_pairs.py``'s neighbourhood
rule keeps them int8 and the Erf between them is cut off on CPU. Matching the rules on the graph
the pairs hide (``float_pairs.read_through``) finds the span whatever pairs sit inside it.

A span counts when it is two or more nodes, its rule is no int8 rule (its chain does not start
at a DequantizeLinear) and it holds an op of no int8 form (an Erf, a Pow, a Sqrt): that op runs
as an fp16 layer whatever happens, so the span around it runs as one fp16 composite instead of
being cut at its pairs. What dropping the pairs inside it costs is ``float_pairs.py``'s bound.

Contract. Requires: parsed rules; a QDQ model, shapes inferred. Ensures: the node sets of those
composites in its ``read_through`` view (each node named by its index in the model); nothing is
changed.
"""
from __future__ import annotations

import functools
from typing import FrozenSet, List, NamedTuple, Sequence

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.frontend.float_pairs import Spans, read_through
from mrvl_convert.ir.match import Rule
from mrvl_convert.layers import MARVELL
from mrvl_convert.rules.int8_forms import int8_op_types
from mrvl_convert.rules.loader import load_rules
from mrvl_convert.rules.matcher import match


class FloatForms(NamedTuple):
    """What ``float_pairs.drop_float_pairs`` reads of a rule set: the op types it has an int8
    form of, and its float composites in a model read through its pairs."""
    int8_ops: FrozenSet[str]
    spans: Spans


def float_forms(rules: Sequence[Rule]) -> FloatForms:
    """``rules``' int8 op types (``int8_forms.py``) and float composites (``float_spans``);
    the same rule objects (every conversion's built-in ones) give the one result made."""
    return _float_forms_of(_Same(rules))


class _Same:
    """Rules as a cache key by identity (a rule holds dicts: it has no hash); the key holds
    them, so no id is reused while it is cached."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self._key = tuple(map(id, self.rules))

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and self._key == other._key


@functools.lru_cache(maxsize=8)
def _float_forms_of(rules: _Same) -> FloatForms:
    return FloatForms(int8_op_types(rules.rules), float_spans(rules.rules))


@functools.lru_cache(maxsize=4)
def builtin_float_forms(layer_set: str = MARVELL) -> FloatForms:
    """``float_forms`` of the built-in rules of ``layer_set`` (cached: the package's own)."""
    return float_forms(load_rules(layer_set=layer_set))


def float_spans(rules: Sequence[Rule]) -> Spans:
    """The float composites ``rules`` recognise in a model read through its pairs (module
    docstring), as ``float_pairs.drop_float_pairs`` takes them."""
    int8_ops = int8_op_types(rules)
    # only a chain of two or more steps with an op of no int8 form can make such a span:
    # matching tries no other rule, and no model without such an op is read through
    floats = tuple(r for r in rules if not (r.steps and r.steps[0].ops == ("DequantizeLinear",))
                   and len(r.steps) > 1 and any(op not in int8_ops for op in r.ops))
    return functools.partial(_spans, floats, int8_ops)


def _spans(rules: Sequence[Rule], int8_ops: FrozenSet[str],
           model: onnx.ModelProto) -> List[FrozenSet[str]]:
    wanted = {op for rule in rules for op in rule.ops if op not in int8_ops}
    if not any(node.op_type in wanted for node in model.graph.node):
        return []
    graph = gs.import_onnx(read_through(model))
    graph.toposort()
    return [frozenset(n.name for n in c.nodes) for c in match(graph, rules).composites
            if len(c.nodes) > 1 and any(n.op not in int8_ops for n in c.nodes)]
