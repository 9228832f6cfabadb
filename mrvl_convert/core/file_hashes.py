"""The stage files of an artifact against the sha256 its manifest records for each of them.

The converter records, in every manifest stage entry, ``"sha256": {file name: digest}`` for each
file the stage is made of (Nodes-JSON, Constants-JSON, CPU-stage ONNX and its external data).
Every reader of an artifact (``HybridSession``, hence ``mrvl-verify``, and the estimate) checks a
file here before it uses it: a weight edited after conversion would otherwise run and move the
outputs unnoticed. A manifest without any ``sha256`` in its stages was written before the hashes
were recorded and is read as it was. The hash detects changes, it does not authenticate: whoever
can rewrite the files can rewrite the manifest too.
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

from mrvl_convert.core.paths import confined
from mrvl_convert.errors import ArtifactError

FIELD = "sha256"
# the fields of a stage entry that name one of its files
FILE_FIELDS = ("nodes_json", "consts_json", "onnx")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BLOCK = 1 << 20  # hashlib.file_digest (3.11) is not in Python 3.10


def check_stage_files(artifact_dir: "str | os.PathLike[str]", manifest: Any,
                      manifest_path: str) -> None:
    """Hash every stage file the manifest records and compare; an ArtifactError naming the
    file on a mismatch. Nothing is checked when no stage records a hash. A missing file is left
    to the reader, which says what it needed it for."""
    recorded = recorded_hashes(manifest, manifest_path)
    if recorded is None:
        return
    for stage, key, name in _named_files(manifest["stages"]):
        # a path out of the directory is refused as the reader would, before it is looked up
        confined(artifact_dir, name, error=ArtifactError,
                 what=f"{manifest_path}: stage {stage}: field '{key}'")
        if name not in recorded:
            raise ArtifactError(f"{manifest_path}: stage {stage}: field '{FIELD}' records no "
                                f"hash of {name!r} (field '{key}')")
    for name in recorded:
        path = confined(artifact_dir, name, error=ArtifactError,
                        what=f"{manifest_path}: a file named in field '{FIELD}'")
        if not path.is_file():
            continue
        actual = file_sha256(path)
        if actual != recorded[name]:
            raise ArtifactError(f"{path}: sha256 {actual} does not match the manifest's "
                                f"{recorded[name]}; the file was changed after conversion")


def recorded_hashes(manifest: Any, manifest_path: str) -> Optional[Dict[str, str]]:
    """{file name: sha256} over every stage, or None when no stage records any. Malformed
    stages are left to the manifest's reader; a malformed hash field is an ArtifactError."""
    stages = manifest.get("stages") if isinstance(manifest, dict) else None
    if not isinstance(stages, list):
        return None
    entries = {k: s for k, s in enumerate(stages) if isinstance(s, dict)}
    if not any(FIELD in s for s in entries.values()):
        return None
    recorded: Dict[str, str] = {}
    for k, stage in entries.items():
        where = f"stage {stage.get('name', f'stages[{k}]')}"
        recorded.update(_stage_hashes(stage, where, manifest_path))
    return recorded


def _stage_hashes(stage: Dict[str, Any], where: str, manifest_path: str) -> Dict[str, str]:
    hashes = stage.get(FIELD)
    if not isinstance(hashes, dict):
        raise ArtifactError(f"{manifest_path}: {where}: field '{FIELD}' must be an object of "
                            f"file name -> sha256 (other stages record one), got {hashes!r:.80}")
    for name, digest in hashes.items():
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise ArtifactError(f"{manifest_path}: {where}: field '{FIELD}': the hash of "
                                f"{name!r} must be 64 lowercase hex digits, got {digest!r:.80}")
    return hashes


def _named_files(stages: List[Any]) -> Iterator[Tuple[str, str, str]]:
    """(stage, field, file name) of every file a stage entry names."""
    for k, stage in enumerate(stages):
        if isinstance(stage, dict):
            for key in FILE_FIELDS:
                if isinstance(stage.get(key), str):
                    yield str(stage.get("name", f"stages[{k}]")), key, stage[key]


def file_sha256(path: "str | os.PathLike[str]") -> str:
    """The sha256 of a file's bytes, read in blocks (a Constants-JSON may be gigabytes)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(_BLOCK), b""):
                digest.update(block)
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read it to check its sha256: "
                            f"{exc.strerror or exc}") from None
    return digest.hexdigest()
