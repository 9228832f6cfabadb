"""The graph ``kept_fp16.round_groups`` rewrites, with its look-ups kept as indexes: verify's
int8 reference in time linear in the model's size.

An unrolled recurrent cell is thousands of small fp16 layers in an int8 model; rounding each
one looked its nodes, its tensors' producers and readers and the initializers up by scanning
the whole graph (a few scans per layer: quadratic, rec-model's onnxruntime-QDQ rows took more
than ten minutes in verify). Here the node list is read once into a working list, and every
change the rounding makes (a node appended or removed, a node's inputs or outputs renamed) goes
through it and updates: the nodes by name, the number of nodes producing each tensor, the nodes
reading each tensor, the initializers by name. A removed node leaves an empty slot, so the
order of the nodes left is the order the repeated field had with the same removals and appends:
the rewritten model is the one the scans made, node for node.

- requires: a graph (its nodes are not read from the proto again until ``commit``); every
  change to a node's inputs or outputs followed by ``refresh(node)`` before the next look-up;
  nodes added and removed through ``node`` (list-like: ``append``, ``extend``, ``remove``, as
  on a ``GraphProto``); initializers only appended, to the proto's own field;
- ensures: the look-ups answer as a scan of the current graph would; ``commit`` writes the
  nodes back into the proto, in order.

``topologically_sorted``: the nodes in an order onnxruntime accepts, once at the end.
"""
from __future__ import annotations

from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

import onnx

_Seen = Tuple[str, Tuple[str, ...], Tuple[str, ...]]  # a node's name, inputs, outputs


class WorkingGraph:
    """A ``GraphProto`` stand-in for ``round_groups`` (module docstring): ``node``,
    ``initializer`` and ``output`` as on the proto, and the look-ups the rounding needs."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.proto = graph
        self.initializer = graph.initializer  # appended to in place: nothing removes one
        self.output = graph.output
        self.node = _Nodes(self)
        self._slots: List[Optional[onnx.NodeProto]] = []
        self._slot_of: Dict[int, int] = {}  # id(node) -> its slot (the list holds the node)
        self._seen: Dict[int, _Seen] = {}
        self._by_name: Dict[str, List[int]] = {}
        self._producers: Dict[str, int] = {}
        self._readers: Dict[str, Set[int]] = {}
        self._outputs = {o.name for o in graph.output}
        self._inits: Dict[str, onnx.TensorProto] = {}
        self._inits_read = 0
        for node in graph.node:
            self.add(node)

    def add(self, node: onnx.NodeProto) -> None:
        slot = len(self._slots)
        self._slots.append(node)
        self._slot_of[id(node)] = slot
        self._record(slot, node)

    def remove(self, node: onnx.NodeProto) -> None:
        slot = self._slot_of.pop(id(node))
        self._forget(slot)
        self._slots[slot] = None

    def refresh(self, node: onnx.NodeProto) -> None:
        """Re-read ``node``'s name, inputs and outputs after it was changed in place."""
        slot = self._slot_of.get(id(node))
        if slot is not None:
            self._forget(slot)
            self._record(slot, node)

    def live(self) -> Iterator[onnx.NodeProto]:
        return (node for node in self._slots if node is not None)

    def members(self, group: Iterable[str]) -> List[onnx.NodeProto]:
        """The nodes named in ``group``, in graph order (``[n for n in graph.node if n.name in
        group]``)."""
        slots = sorted({s for name in set(group) for s in self._by_name.get(name, ())})
        return [self._slots[s] for s in slots]  # type: ignore[misc]

    @property
    def named(self) -> Mapping[str, onnx.NodeProto]:
        """``{n.name: n for n in graph.node}`` (the last node of each name), as a view."""
        return _Named(self)

    def last_named(self, name: str) -> Optional[onnx.NodeProto]:
        slots = self._by_name.get(name)
        return self._slots[slots[-1]] if slots else None

    def produces(self, name: str) -> bool:
        """Whether some node has ``name`` among its outputs."""
        return self._producers.get(name, 0) > 0

    def leaves(self, name: str, group: Iterable[str]) -> bool:
        """Whether ``name`` is a graph output or some node not named in ``group`` reads it."""
        names = set(group)
        return name in self._outputs or any(
            self._slots[s].name not in names  # type: ignore[union-attr]
            for s in self._readers.get(name, ()))

    def inits(self) -> Dict[str, onnx.TensorProto]:
        """``{t.name: t for t in graph.initializer}``, the same dict on every call (the ones
        appended since are added; a caller may add to it too)."""
        for tensor in self.initializer[self._inits_read:]:
            self._inits[tensor.name] = tensor
        self._inits_read = len(self.initializer)
        return self._inits

    def commit(self) -> None:
        """Write the nodes back into the proto, in order."""
        nodes = []
        for node in self.live():
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            nodes.append(copy)
        del self.proto.node[:]
        self.proto.node.extend(nodes)

    def _record(self, slot: int, node: onnx.NodeProto) -> None:
        seen = (node.name, tuple(node.input), tuple(node.output))
        self._seen[slot] = seen
        self._by_name.setdefault(seen[0], []).append(slot)
        self._by_name[seen[0]].sort()  # a refresh re-appends: keep the graph order
        for name in seen[1]:
            self._readers.setdefault(name, set()).add(slot)
        for name in seen[2]:
            self._producers[name] = self._producers.get(name, 0) + 1

    def _forget(self, slot: int) -> None:
        name, inputs, outputs = self._seen.pop(slot)
        self._by_name[name].remove(slot)
        for tensor in inputs:
            self._readers[tensor].discard(slot)
        for tensor in outputs:
            self._producers[tensor] -= 1


class _Named(Mapping):  # type: ignore[type-arg]
    """The nodes by name (``WorkingGraph.named``), looked up in the index."""

    def __init__(self, graph: WorkingGraph) -> None:
        self._graph = graph

    def __getitem__(self, name: str) -> onnx.NodeProto:
        node = self._graph.last_named(name)
        if node is None:
            raise KeyError(name)
        return node

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(node.name for node in self._graph.live()))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Nodes:
    """``graph.node`` as the rounding uses it: appends, removals, iteration."""

    def __init__(self, graph: WorkingGraph) -> None:
        self._graph = graph

    def append(self, node: onnx.NodeProto) -> None:
        self._graph.add(node)

    def extend(self, nodes: Iterable[onnx.NodeProto]) -> None:
        for node in nodes:
            self._graph.add(node)

    def remove(self, node: onnx.NodeProto) -> None:
        self._graph.remove(node)

    def __iter__(self) -> Iterator[onnx.NodeProto]:
        return self._graph.live()


def topologically_sorted(proto: onnx.ModelProto) -> None:
    """The graph's nodes in an order onnxruntime accepts (Cast pairs were appended)."""
    graph = proto.graph
    nodes = [onnx.NodeProto() for _ in graph.node]
    for copy, node in zip(nodes, graph.node):
        copy.CopyFrom(node)
    known: Set[str] = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    ordered: List[int] = []
    state: Dict[int, int] = {}  # 1: being visited, 2: placed
    for start in range(len(nodes)):
        stack = [(start, iter(nodes[start].input))]
        while stack:
            k, inputs = stack[-1]
            if state.get(k) == 2:
                stack.pop()
                continue
            state[k] = 1
            nxt = next((producer[i] for i in inputs if i and i not in known and i in producer
                        and state.get(producer[i]) is None), None)
            if nxt is not None:
                stack.append((nxt, iter(nodes[nxt].input)))
                continue
            state[k] = 2
            ordered.append(k)
            stack.pop()
    del graph.node[:]
    graph.node.extend(nodes[k] for k in ordered)
