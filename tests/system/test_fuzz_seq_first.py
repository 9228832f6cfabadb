"""Property tests over drawn sequence-first ``[T, 1, E]`` chains
(tests/support/strategies/seq_first.py, ``frontend/seq_first.py``): the rewrite keeps
onnxruntime's outputs bit for bit, and a chain from a batch-first input with an FC and no mean
over the positions converts whole (one Mrvl subgraph, verify passing). Quick profile by default (a tenth of its examples)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from hypothesis import assume, given, settings

from mrvl_convert.frontend.canonical_forms import Rewrites
from mrvl_convert.frontend.seq_first import run_sequence_first
from support.models import run_ort
from support.strategies.seq_first import seq_first_models
from support.strategies.seqaxis import assert_whole_and_verified

pytestmark = pytest.mark.system

_FEW = settings(max_examples=max(2, settings.default.max_examples // 10), deadline=None)


@_FEW
@given(case=seq_first_models())
def test_the_rewrite_keeps_onnxruntime_outputs_bit_for_bit(case):
    graph = gs.import_onnx(case.model)
    run_sequence_first(graph, Rewrites())  # a chain of only "pooled" has no region
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    proto = gs.export_onnx(graph)
    proto.ir_version = case.model.ir_version
    proto = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    want = run_ort(case.model, case.feeds, optimize=False)["y"]
    assert np.array_equal(run_ort(proto, case.feeds, optimize=False)["y"], want), case.spec


@_FEW
@given(case=seq_first_models(entry="Transpose"))
def test_a_batch_first_chain_converts_whole(case, tmp_path_factory):
    assume("matmul" in case.spec["kinds"])  # a Mrvl region needs a compute-heavy layer
    # An Add of [T, 1, E] and an activation [1, 1, E] (the pooled mean) is no region op
    # (seq_first.py): the mean of the model's batch axis stays on CPU.
    assume("pooled" not in case.spec["kinds"])
    assert_whole_and_verified(case.model, tmp_path_factory.mktemp("seq_first") / "art",
                              samples=1)
