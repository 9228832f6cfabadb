"""Which op types the rule set has an int8 form of: the ops of the composites whose chain starts
at a DequantizeLinear (the int8 rules, ``rules/marvell/qnn.yaml``: each layer
``DequantizeLinear -> op -> QuantizeLinear``), QDQ nodes themselves not counted.

An op type outside this set (ReduceMean, Pow, Sqrt, Erf, Softmax, LayerNormalization...) never
runs in int8: in a QDQ model it runs as an fp16 layer between the int8 layers, or on CPU. The
QDQ pairs the foreign pass drops around such ops (``frontend/float_pairs.py``), the nodes our
recipe leaves in float (``quantize/recipe.py``) and the ``float_region`` check all read it here,
so a rule file that adds an int8 form changes all three.

Contract. Requires: parsed rules. Ensures: a frozenset of op types; nothing is changed.
"""
from __future__ import annotations

import functools
from typing import FrozenSet, Iterable

from mrvl_convert.ir.match import Rule
from mrvl_convert.layers import MARVELL

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


def int8_op_types(rules: Iterable[Rule]) -> FrozenSet[str]:
    """The op types some int8 rule of ``rules`` computes (module docstring)."""
    return frozenset(op for rule in rules
                     if rule.steps and rule.steps[0].ops == ("DequantizeLinear",)
                     for op in rule.ops) - QDQ_OPS


@functools.lru_cache(maxsize=4)
def builtin_int8_op_types(layer_set: str = MARVELL) -> FrozenSet[str]:
    """``int8_op_types`` of the built-in rules of ``layer_set`` (cached: the files are the
    package's own)."""
    from mrvl_convert.rules.loader import load_rules
    return int8_op_types(load_rules(layer_set=layer_set))
