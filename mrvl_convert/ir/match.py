"""What passes between matching and lowering: a loaded rule (plain frozen data, no behaviour and
no state between matches), a match result with its reason, a matched composite and the plan."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

import onnx_graphsurgeon as gs

_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


@dataclass(frozen=True)
class Step:
    role: str
    ops: Tuple[str, ...]
    optional: bool = False


@dataclass(frozen=True)
class Constraint:
    role: str
    check: str
    reason: str
    args: Mapping[str, Any] = field(default_factory=dict)
    generic: bool = False   # from the rule file's ``defaults``, not the composite's own list

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.args.items())
        return f"{self.check}({args}) on {self.role}" if args else f"{self.check} on {self.role}"


@dataclass(frozen=True)
class Rule:
    name: str
    layer: str
    steps: Tuple[Step, ...]
    constraints: Tuple[Constraint, ...]
    priority: int = 100
    summary: str = ""
    source: str = "builtin"
    # Op types whose nodes feeding the chain only are fused too (the int8 rules absorb the
    # DequantizeLinear of their weights, biases and second operands).
    absorb: Tuple[str, ...] = ()
    # What report.json says on each node the composite takes (an approximation and its bound).
    note: str = ""
    # The role of the node the rule is about, where not the first required step's (a channel
    # shuffle is about its Transpose: a node's most telling miss is the rule about it).
    anchor: str = ""

    @functools.cached_property
    def ops(self) -> Tuple[str, ...]:
        # derived from the frozen steps once (the matcher and the rule-set scans of every
        # conversion ask each rule for it)
        return tuple(op for step in self.steps for op in step.ops)


@dataclass(frozen=True)
class Binding:
    """One way a rule's pattern lies on the graph: role -> node, in chain order."""
    rule: Rule
    roles: Tuple[Tuple[str, gs.Node], ...]

    def node(self, role: str) -> Optional[gs.Node]:
        for name, node in self.roles:
            if name == role:
                return node
        return None

    @property
    def nodes(self) -> List[gs.Node]:
        return [node for _, node in self.roles]

    @property
    def anchor(self) -> gs.Node:
        """The node of the rule's ``anchor`` role, or of the first required step: what the rule
        is about."""
        if self.rule.anchor:
            return self.node(self.rule.anchor)
        required = [node for role, node in self.roles
                    if role in {s.role for s in self.rule.steps if not s.optional}]
        # An int8 chain is about its op, not the DequantizeLinear / QuantizeLinear around it.
        return next((n for n in required if n.op not in _QDQ_OPS), required[0])


@dataclass(frozen=True)
class MatchResult:
    """The outcome of trying a rule on a chain: a binding, and if it failed, why and where."""
    binding: Binding
    reason: Optional[str] = None
    failed_nodes: Tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.reason is None

    @staticmethod
    def success(binding: Binding) -> "MatchResult":
        return MatchResult(binding)

    @staticmethod
    def fail(binding: Binding, reason: str, nodes: Tuple[str, ...]) -> "MatchResult":
        return MatchResult(binding, reason, nodes)


@dataclass
class Composite:
    rule: Rule
    binding: Binding

    @property
    def nodes(self) -> List[gs.Node]:
        return self.binding.nodes

    @property
    def output(self) -> gs.Tensor:
        return self.nodes[-1].outputs[0]


@dataclass
class MatchPlan:
    composites: List[Composite]
    owner: Dict[str, int]                                   # node name -> composite index
    near_miss: Dict[str, MatchResult] = field(default_factory=dict)
    unmatched_reason: Dict[str, str] = field(default_factory=dict)
    elsewhere: Dict[str, str] = field(default_factory=dict)   # node -> another layer set's take
