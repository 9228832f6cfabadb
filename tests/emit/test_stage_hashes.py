"""The manifest records the sha256 of every stage file, hashed from the bytes the writer wrote."""
from __future__ import annotations

import copy
import hashlib
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import mrvl_convert
from mrvl_convert.emit import cpu_onnx
from mrvl_convert.emit.publish import StagingDir
from mrvl_convert.emit.validate import validate
from mrvl_convert.errors import ArtifactError

from support.models import conv_then_cpu_tail

NOT_ASCII = "relu_\u00e9\u2028"  # a node name in the artifact that is not ASCII


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("external", [False, True])
def test_every_stage_file_is_recorded_with_its_sha256(tmp_path, monkeypatch, external):
    if external:  # every CPU stage keeps its weights in a data file beside it
        monkeypatch.setattr(cpu_onnx, "EXTERNAL_DATA_THRESHOLD", 0)
    result = mrvl_convert.convert(conv_then_cpu_tail(NOT_ASCII), tmp_path / "o", name="m")
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest == result.manifest
    recorded = {}
    for stage in manifest["stages"]:
        named = [stage[k] for k in ("nodes_json", "consts_json", "onnx") if k in stage]
        assert set(named) <= set(stage["sha256"])
        recorded.update(stage["sha256"])
    stage_files = {p.name for p in result.files} - {"manifest.json", "report.json"}
    assert set(recorded) == stage_files
    assert ("m_cpu_0.onnx.data" in stage_files) == external
    assert recorded == {name: sha256(tmp_path / "o" / name) for name in stage_files}
    validate(manifest, "manifest", label="manifest.json")


def model_with_subgraph_weights() -> onnx.ModelProto:
    """Weights below, at and above onnx's 1024-byte line (by sys.getsizeof), one in a branch."""
    def const(name: str, count: int) -> TensorProto:
        return numpy_helper.from_array(np.arange(count, dtype=np.uint8), name)

    branch = helper.make_graph([helper.make_node("Identity", ["inner"], ["o"])], "then", [],
                               [helper.make_tensor_value_info("o", TensorProto.UINT8, [3000])],
                               [const("inner", 3000)])
    nodes = [helper.make_node("If", ["cond"], ["out"], then_branch=branch, else_branch=branch)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.UINT8, [3000])],
        [const("small", 990), const("edge", 991), const("big", 5000)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("model", [model_with_subgraph_weights(), conv_then_cpu_tail(NOT_ASCII)],
                         ids=["weights", "no-large-weight"])
def test_external_data_is_written_byte_for_byte_as_onnx_writes_it(tmp_path, monkeypatch, model):
    monkeypatch.chdir(tmp_path)  # onnx looks for the data file's name in the working directory
    (tmp_path / "onnx").mkdir()
    onnx.save_model(copy.deepcopy(model), str(tmp_path / "onnx" / "s.onnx"),
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="s.onnx.data", size_threshold=1024)
    with StagingDir(tmp_path / "ours") as staging:
        staging.write_onnx("s.onnx", copy.deepcopy(model), external=True)
        staging.publish()
    theirs = sorted(p.name for p in (tmp_path / "onnx").iterdir())
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == theirs
    for name in theirs:
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "onnx" / name).read_bytes()
    assert staging.digests == {"s.onnx": {n: sha256(tmp_path / "ours" / n) for n in theirs}}


def test_external_data_layout_round_trips(tmp_path):
    model = model_with_subgraph_weights()
    with StagingDir(tmp_path / "ours") as staging:
        staging.write_onnx("s.onnx", copy.deepcopy(model), external=True)
        staging.publish()
    loaded = onnx.load(str(tmp_path / "ours" / "s.onnx"))
    assert [t.data_location for t in loaded.graph.initializer] == [
        TensorProto.DEFAULT, TensorProto.DEFAULT, TensorProto.DEFAULT]  # loaded back in place
    assert loaded.graph.initializer[2].raw_data == model.graph.initializer[2].raw_data
    inner = loaded.graph.node[0].attribute[0].g.initializer[0]
    assert inner.raw_data == bytes(np.arange(3000, dtype=np.uint8))


@pytest.fixture(scope="module")
def written_manifest(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("art") / "o"
    mrvl_convert.convert(conv_then_cpu_tail(NOT_ASCII), out, name="m")
    manifest = json.loads((out / "manifest.json").read_text())
    validate(manifest, "manifest", label="manifest.json")
    return manifest


@pytest.mark.parametrize("digest", ["0" * 63, "0" * 65, "A" * 64, "g" * 64, "", 5, None])
def test_a_hash_that_is_not_64_lowercase_hex_fails_the_schema(written_manifest, digest):
    manifest = copy.deepcopy(written_manifest)
    manifest["stages"][1]["sha256"]["m_cpu_0.onnx"] = digest
    with pytest.raises(ArtifactError, match="manifest.schema.json at stages/1"):
        validate(manifest, "manifest", label="manifest.json")


@pytest.mark.parametrize("hashes", [{}, {"../x.onnx": "0" * 64}, ["0" * 64]])
def test_a_malformed_hash_field_fails_the_schema(written_manifest, hashes):
    manifest = copy.deepcopy(written_manifest)
    manifest["stages"][0]["sha256"] = hashes
    with pytest.raises(ArtifactError, match="manifest.schema.json at stages/0"):
        validate(manifest, "manifest", label="manifest.json")
