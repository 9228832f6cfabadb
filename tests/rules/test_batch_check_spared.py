"""rules/checks.py's batch check walks the graph for the model's batch (``model_batch``) only
where a node's own batch is over the limit: at batch 1 the answer is known without it (the
matcher asks per node, on an unrolled cell's thousands of nodes)."""
from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from mrvl_convert.rules import checks
from mrvl_convert.rules.loader import load_rules
from mrvl_convert.rules.matcher import match
from support.recurrent import crnn


def test_batch_one_nodes_never_walk_for_the_models_batch(monkeypatch) -> None:
    walks = []
    real = checks.model_batch
    monkeypatch.setattr(checks, "model_batch", lambda graph: walks.append(1) or real(graph))
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(crnn(steps=4)))
    plan = match(graph, load_rules())
    assert plan.composites  # the Conv, Relu, MaxPool... matched, each checked for its batch
    assert walks == []


def test_a_node_over_the_limit_still_asks_for_the_models_batch(monkeypatch) -> None:
    walks = []
    real = checks.model_batch
    monkeypatch.setattr(checks, "model_batch", lambda graph: walks.append(1) or real(graph))
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(crnn(steps=4)))
    conv = next(n for n in graph.nodes if n.op == "Conv")
    checks.check_batch_at_most(conv, {"max": 0, "limit": "max_batch"}, graph)
    assert walks  # whether it then passes is chunk_refusal's to say
