"""An If whose branches read tensors of the main graph by name (PyTorch's Silero VAD export:
its decoder's second If reads the first If's output and an initializer only inside its
branches). onnxruntime's quantizer sorted that If before the first one, and
``QdqGraph.commit`` (``float_pairs.py``) then dropped the first If and the initializer as
unread: silero_vad_half with ``--quantize int8`` failed onnx's checker. Now the QDQ model keeps
them, in order (``quantize/scope_order.py``, ``core/scopes.py``), and converts."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from mrvl_convert.core.scopes import outer_reads
from mrvl_convert.frontend.qdq_graph import QdqGraph
from mrvl_convert.quantize.scope_order import ordered_for_branches
from support.scout_int8 import int8_artifact
from support.strategies.scout import two_ifs


def test_outer_reads_name_what_a_branch_takes_from_outside():
    if_b = next(n for n in two_ifs().graph.node if n.name == "if_b")
    branches = {a.name: a.g for a in if_b.attribute}
    assert outer_reads(branches["then_branch"]) == {"a", "w_b"}
    assert outer_reads(branches["else_branch"]) == {"a"}


def test_misordered_ifs_are_put_in_order():
    model = two_ifs([0, 1, 2, 3, 5, 4, 6])
    assert ordered_for_branches(model)
    names = [n.name for n in model.graph.node]
    assert names.index("if_a") < names.index("if_b")
    assert names == ["shape", "gather", "equal", "squeeze", "if_a", "if_b", "fc"]  # stable
    onnx.checker.check_model(model)
    assert not ordered_for_branches(model)  # in order already: unchanged


def test_commit_keeps_what_only_a_branch_reads():
    model = two_ifs()
    QdqGraph(model).commit()
    assert [n.name for n in model.graph.node] == [n.name for n in two_ifs().graph.node]
    assert "w_b" in {t.name for t in model.graph.initializer}


def test_int8_model_with_branch_reads_converts(tmp_path: Path):
    rng = np.random.default_rng(1)
    result = int8_artifact(two_ifs(), tmp_path,
                           {"x": rng.standard_normal((8, 8)).astype(np.float32)})
    qdq = onnx.load(result.out_dir / result.manifest["quantization"]["file"])
    onnx.checker.check_model(qdq)
    assert {"if_a", "if_b"} <= {n.name for n in qdq.graph.node}
    assert result.report["precision"]["shares"]["int8"] == 1.0
