"""A stage file changed after conversion is refused by every reader, naming the file: the
HybridSession, mrvl-verify (which opens one) and the estimate of an artifact."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import onnx
import pytest

import mrvl_convert
from mrvl_convert.cli import verify_main
from mrvl_convert.emit import cpu_onnx
from mrvl_convert.errors import ArtifactError
from mrvl_convert.estimate import estimate_artifact
from mrvl_convert.runtime.session import HybridSession

from support.models import conv_then_cpu_tail

FEED = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}
# each kind of stage file, in the artifact with external CPU-stage data
KINDS = {"nodes": "m_mrvl_0-nodes.json", "consts": "m_mrvl_0-consts.json",
         "onnx": "m_cpu_0.onnx", "onnx data": "m_cpu_0.onnx.data"}


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "m.onnx"
    onnx.save(conv_then_cpu_tail(), str(path))
    return path


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, model_path) -> Path:
    """Converted with every CPU stage's weights in an external data file (all four kinds)."""
    out = tmp_path_factory.mktemp("art") / "m"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_onnx, "EXTERNAL_DATA_THRESHOLD", 0)
        mrvl_convert.convert(str(model_path), out, name="m")
    assert sorted(KINDS.values()) == sorted(p.name for p in out.iterdir()
                                            if p.name not in ("manifest.json", "report.json"))
    return out


@pytest.fixture
def copy(artifact, tmp_path) -> Path:
    target = tmp_path / "work" / "m"
    shutil.copytree(artifact, target)
    return target


def flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def edit_manifest(art: Path, change) -> None:
    manifest = json.loads((art / "manifest.json").read_text())
    change(manifest)
    (art / "manifest.json").write_text(json.dumps(manifest))


def assert_names_the_change(message: str, path: Path) -> None:
    assert f"{path.resolve()}: sha256 " in message
    assert "does not match the manifest's" in message
    assert "the file was changed after conversion" in message
    assert "\n" not in message


def test_the_untouched_artifact_loads_runs_and_estimates(artifact):
    expected = mrvl_convert.HybridSession(artifact).run(None, FEED)[0]
    assert expected.shape == (1, 4, 8, 8)
    assert estimate_artifact(artifact)["stages"][1]["kind"] == "cpu"


@pytest.mark.parametrize("kind", KINDS)
def test_a_changed_byte_is_refused_by_the_session(copy, kind):
    flip_one_byte(copy / KINDS[kind])
    with pytest.raises(ArtifactError) as info:
        HybridSession(copy)
    assert_names_the_change(str(info.value), copy / KINDS[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_a_changed_byte_is_refused_by_the_estimate(copy, kind):
    flip_one_byte(copy / KINDS[kind])
    with pytest.raises(ArtifactError) as info:
        estimate_artifact(copy)
    assert_names_the_change(str(info.value), copy / KINDS[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_a_changed_byte_is_refused_by_mrvl_verify(copy, model_path, capsys, kind):
    flip_one_byte(copy / KINDS[kind])
    code = verify_main([str(model_path), str(copy)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("mrvl-verify: error: ") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err
    assert_names_the_change(captured.err.rstrip("\n"), copy / KINDS[kind])


def test_mrvl_verify_in_a_process_says_one_line(copy, model_path):
    flip_one_byte(copy / KINDS["consts"])
    verify = Path(sys.executable).parent / "mrvl-verify"
    done = subprocess.run([str(verify), str(model_path), str(copy)], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert_names_the_change(done.stderr.rstrip("\n"), copy / KINDS["consts"])


def flip_sign_of_one_weight(consts: Path) -> None:
    doc = json.loads(consts.read_text())
    entry = next(e for e in doc.values() if e["dtype"] == "float32" and len(e["shape"]) == 4)
    weights = np.frombuffer(base64.b64decode(entry["data_base64"]), "<f4").copy()
    weights[0] = -weights[0]
    entry["data_base64"] = base64.b64encode(weights.tobytes()).decode("ascii")
    consts.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


def drop_hashes(manifest: Dict) -> None:
    for stage in manifest["stages"]:
        del stage["sha256"]


def test_a_sign_flip_runs_unnoticed_without_the_hashes(copy, artifact):
    """What the hashes are for: the changed weight runs and moves the output. A manifest
    without any hash (written before they were recorded) is read as it always was."""
    expected = HybridSession(artifact).run(None, FEED)[0]
    flip_sign_of_one_weight(copy / KINDS["consts"])
    with pytest.raises(ArtifactError, match="changed after conversion"):
        HybridSession(copy)
    edit_manifest(copy, drop_hashes)
    moved = HybridSession(copy).run(None, FEED)[0]
    assert not np.array_equal(moved, expected)
    assert estimate_artifact(copy)["stages"][0]["kind"] == "mrvl"


def test_a_stage_without_hashes_beside_one_with_is_refused(copy):
    edit_manifest(copy, lambda m: m["stages"][1].pop("sha256"))
    with pytest.raises(ArtifactError, match=r"stage m_cpu_0: field 'sha256' must be an object"):
        HybridSession(copy)


def test_a_stage_file_without_its_hash_is_refused(copy):
    edit_manifest(copy, lambda m: m["stages"][0]["sha256"].pop(KINDS["consts"]))
    with pytest.raises(ArtifactError, match=r"records no hash of 'm_mrvl_0-consts.json' "
                                            r"\(field 'consts_json'\)"):
        HybridSession(copy)


@pytest.mark.parametrize("digest", ["0" * 63, "A" * 64, 7])
def test_a_malformed_hash_is_refused(copy, digest):
    edit_manifest(copy, lambda m: m["stages"][0]["sha256"].__setitem__(KINDS["nodes"], digest))
    with pytest.raises(ArtifactError, match="64 lowercase hex digits"):
        HybridSession(copy)


def test_a_hashed_file_outside_the_directory_is_not_read(copy):
    edit_manifest(copy, lambda m: m["stages"][0]["sha256"].__setitem__("../../x", "0" * 64))
    with pytest.raises(ArtifactError, match=r"field 'sha256' '../../x' goes up a directory"):
        HybridSession(copy)
