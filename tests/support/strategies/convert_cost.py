"""Random graphsurgeon graphs for ``core/cleanup.py``: what graphsurgeon's cleanup must agree
on. A spec is a flat JSON-able dict: graph inputs, constants, and nodes in a random order, each
reading earlier tensors (a graph input, a constant, another node's output, an omitted optional
"" input, or a name no node makes: a foreign tensor), writing one or two outputs (one may be
omitted, ""), some writing a graph input (graphsurgeon disconnects those), and some model
outputs; nodes no output depends on, and tensors whose names repeat, occur.

``graph_specs()`` draws a spec; ``graph_from_spec(spec)`` builds a fresh graph and the list
of every node made (removed ones included), from it alone.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
import onnx_graphsurgeon as gs
from hypothesis import strategies as st


@st.composite
def graph_specs(draw: Any) -> Dict[str, Any]:
    inputs = draw(st.integers(1, 3))
    consts = draw(st.integers(0, 3))
    count = draw(st.integers(1, 12))
    nodes = []
    for k in range(count):
        # tensors this node may read: inputs i*, constants c*, outputs of earlier nodes, "",
        # a foreign name, and (rarely) a name that repeats another tensor's
        pool = ([f"i{j}" for j in range(inputs)] + [f"c{j}" for j in range(consts)]
                + [f"t{j}" for j in range(k)] + ["", "foreign", "c0_again"])
        reads = draw(st.lists(st.sampled_from(pool), min_size=0, max_size=3))
        writes = [f"t{k}"] + draw(st.sampled_from([[], [""], [f"u{k}"]]))
        into_input = draw(st.sampled_from([None] * 5 + [f"i{j}" for j in range(inputs)]))
        nodes.append({"reads": reads, "writes": writes, "into_input": into_input})
    order = draw(st.permutations(list(range(count))))
    outputs = draw(st.lists(st.sampled_from([f"t{k}" for k in range(count)]
                                            + [f"i{j}" for j in range(inputs)]),
                            min_size=1, max_size=3, unique=True))
    return {"inputs": inputs, "consts": consts, "nodes": nodes, "order": list(order),
            "outputs": outputs}


def graph_from_spec(spec: Dict[str, Any]) -> Tuple[gs.Graph, List[gs.Node]]:
    """A fresh graph for ``spec`` and every node made for it."""
    tensors: Dict[str, gs.Tensor] = {}
    for j in range(spec["inputs"]):
        tensors[f"i{j}"] = gs.Variable(f"i{j}", np.float32, [1, 4])
    for j in range(spec["consts"]):
        tensors[f"c{j}"] = gs.Constant(f"c{j}", np.full([1, 4], j, np.float32))
    tensors["foreign"] = gs.Variable("foreign", np.float32, [1, 4])
    made: List[gs.Node] = []
    for k, entry in enumerate(spec["nodes"]):
        reads = [_tensor(tensors, name) for name in entry["reads"]]
        writes = [_tensor(tensors, name) for name in entry["writes"]]
        if entry["into_input"]:
            writes.append(tensors[entry["into_input"]])
        made.append(gs.Node("Relu", f"n{k}", inputs=reads, outputs=writes))
    nodes = [made[k] for k in spec["order"]]
    graph = gs.Graph(nodes=nodes, inputs=[tensors[f"i{j}"] for j in range(spec["inputs"])],
                     outputs=[tensors[name] for name in spec["outputs"]])
    return graph, made


def _tensor(tensors: Dict[str, gs.Tensor], name: str) -> gs.Tensor:
    if name == "":
        return gs.Variable("")  # each omitted optional tensor its own object
    if name == "c0_again":  # a distinct tensor under a taken name
        return gs.Constant("c0" if "c0" in tensors else "i0", np.zeros([1, 4], np.float32))
    if name not in tensors:
        tensors[name] = gs.Variable(name, np.float32, [1, 4])
    return tensors[name]


def described(graph: gs.Graph, made: List[gs.Node]) -> Dict[str, Any]:
    """What a cleanup may change, by name: the node list, every node's (removed ones too)
    inputs and outputs, the graph's inputs and outputs, and each tensor's producers."""
    return {"nodes": [n.name for n in graph.nodes],
            "wiring": [(n.name, [t.name for t in n.inputs], [t.name for t in n.outputs],
                        [[p.name for p in t.inputs] for t in n.inputs])
                       for n in made],
            "inputs": [(t.name, [p.name for p in t.inputs]) for t in graph.inputs],
            "outputs": [(t.name, [p.name for p in t.inputs]) for t in graph.outputs]}
