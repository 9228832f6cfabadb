"""Write an artifact directory all at once: into a hidden sibling first, renamed into place at the end.

A failure anywhere leaves no partial directory behind, and never touches an existing directory
that is not ours. SIGTERM (``timeout``, ``docker stop``, Kubernetes) during the write removes the
staging directory, then ends the process as SIGTERM would have; Ctrl-C removes it too, and a
SIGTERM during that removal waits for it to finish. A run killed outright (SIGKILL,
power loss) leaves ``.<name>.tmp-<pid>-*``: the next run of the same model removes those whose
process is gone (on this host: the PID is the owner).

Test hook (private): ``_MRVL_CONVERT_TEST_WRITE_DELAY=<seconds>`` sleeps before each file is
written, so a test can send a signal mid-write.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import tempfile
import threading
import time
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import onnx

from mrvl_convert.errors import OutputDirError
from mrvl_convert.emit.base64_text import consts_chunks, without_base64
from mrvl_convert.emit.external_data import externalize
from mrvl_convert.emit.json_text import IndentedJSON
from mrvl_convert.emit.validate import self_check, validate


def _encoder(compact: bool) -> json.JSONEncoder:
    if compact:
        return json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
    return json.JSONEncoder(indent=2, ensure_ascii=False)


def dumps(document: Any, *, compact: bool = False) -> bytes:
    return (_encoder(compact).encode(document) + "\n").encode("utf-8")


def _blocks(chunks: Iterable[str], size: int = 1 << 16) -> Iterator[bytes]:
    """``chunks`` joined into blocks of about ``size`` characters, as UTF-8: one write and one
    hash update per block, not per token the JSON encoder yields."""
    block: List[str] = []
    held = 0
    for chunk in chunks:
        block.append(chunk)
        held += len(chunk)
        if held >= size:
            yield "".join(block).encode("utf-8")
            block, held = [], 0
    if block:
        yield "".join(block).encode("utf-8")


class StagingDir:
    def __init__(self, out_dir: Path, label: Optional[str] = None) -> None:
        self.out_dir = Path(out_dir)
        self.label = label  # the model, named in every OutputDirError
        self.files: List[str] = []
        # {file written: {each file it is made of (an ONNX file and its data): sha256}}, hashed
        # from the bytes as they were written
        self.digests: Dict[str, Dict[str, str]] = {}
        self.path: Optional[Path] = None
        self._previous_sigterm: object = None

    def __enter__(self) -> "StagingDir":
        parent = self.out_dir.parent
        blocker = next((p for p in [self.out_dir, *self.out_dir.parents]
                        if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise OutputDirError(f"cannot write the output directory {self.out_dir}: {blocker} "
                                 "is a file, not a directory", model=self.label)
        _check_replaceable(self.out_dir, self.label)
        # Caught before the staging directory exists: a SIGTERM in between would leave it behind.
        self._previous_sigterm = _catch_sigterm()
        try:
            parent.mkdir(parents=True, exist_ok=True)
            clean_stale(parent, self.out_dir.name)
            for self.path in _fresh_names(parent, _prefix(self.out_dir.name, "tmp")):
                try:   # named before it exists: a Ctrl-C right after mkdir still finds it
                    os.mkdir(self.path, 0o700)
                    break
                except FileExistsError:
                    continue
        except OSError as exc:
            _restore_sigterm(self._previous_sigterm)
            raise OutputDirError(f"cannot write the output directory {self.out_dir}: "
                                 f"{exc.strerror or exc}", model=self.label) from None
        except BaseException as exc:  # SIGTERM or Ctrl-C: __exit__ is not called for us
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        terminated = exc_type is _Terminated
        _HELD_SIGTERM.holding = True  # SIGTERM (the pool ending its workers after Ctrl-C)
        try:                          # must not cut the removal short: it waits for it
            if exc_type is not None and self.path is not None and self.path.exists():
                shutil.rmtree(self.path, ignore_errors=True)
        finally:
            terminated = _HELD_SIGTERM.release() or terminated
            _restore_sigterm(self._previous_sigterm)
            if terminated:  # cleaned up: now end as SIGTERM would have
                os.kill(os.getpid(), signal.SIGTERM)

    def _target(self, name: str) -> Path:
        # File names come from our own sanitised model name; still, never leave the directory.
        if os.sep in name or (os.altsep and os.altsep in name) or name.startswith("."):
            raise OutputDirError(f"refusing to write {name!r}: not a plain file name",
                                 model=self.label)
        self.files.append(name)
        delay = os.environ.get("_MRVL_CONVERT_TEST_WRITE_DELAY")
        if delay:
            time.sleep(float(delay))
        return self.path / name

    def write_json(self, name: str, document: Any, kind: str, *, compact: bool = False) -> None:
        if self_check():
            validate(document, kind, label=name)
        # Streamed in blocks: a large document is never held as one str plus its bytes. The
        # indented text is json_text's (the standard encoder's bytes, in fewer Python steps).
        text = (_encoder(compact).iterencode(document) if compact
                else IndentedJSON().iterencode(document))
        chunks = chain(text, ["\n"])
        self.digests[name] = {name: self._write(name, _blocks(chunks))}

    def write_consts(self, name: str, document: Dict[str, Dict[str, Any]]) -> None:
        """A Constants-JSON, compact: the bytes ``write_json(name, document, "consts",
        compact=True)`` writes, its base64 text encoded once, where it was made (and its
        structure checked under ``self_check``, the base64 text standing in as "")."""
        if self_check():
            validate(without_base64(document), "consts", label=name)
        self.digests[name] = {name: self._write(name, consts_chunks(document))}

    def _write(self, name: str, chunks: Iterable[bytes]) -> str:
        """Write ``name`` from ``chunks``; the sha256 of the bytes written."""
        digest = hashlib.sha256()
        try:
            with open(self._target(name), "wb") as handle:
                for chunk in chunks:
                    digest.update(chunk)
                    handle.write(chunk)
        except OSError as exc:
            raise OutputDirError(f"cannot write {name} in {self.out_dir}: "
                                 f"{exc.strerror or exc}", model=self.label) from None
        return digest.hexdigest()

    def write_bytes(self, name: str, data: bytes) -> None:
        self.digests[name] = {name: self._write(name, [data])}

    def write_onnx(self, name: str, model: onnx.ModelProto, *, external: bool) -> None:
        if not external:
            self.digests[name] = {name: self._write(
                name, [model.SerializeToString(deterministic=True)])}
            return
        data_name = f"{name}.data"
        chunks = externalize(model, data_name)
        first = next(chunks, None)  # no large weight, no data file (as onnx.save_model)
        digests = {} if first is None else {data_name: self._write(data_name,
                                                                   chain([first], chunks))}
        # as onnx.save_model serialises a model whose weights it wrote beside it
        digests[name] = self._write(name, [model.SerializeToString()])
        self.digests[name] = digests

    def publish(self, before: Optional[Callable[[], None]] = None) -> None:
        """Swap the staged directory into place (an old artifact directory is replaced).
        Under OUT's lock: of two runs publishing one name at once, the later one replaces
        the earlier one's directory whole, never mixing their files. ``before()`` is called
        under the lock just before the swap: from then on the model is written, whatever
        comes next (a batch worker stops letting Ctrl-C end it, or its outcome would be lost
        while its directory stays)."""
        with out_lock(self.out_dir.parent, self.label):
            if before is not None:
                before()
            self._swap()

    def _swap(self) -> None:
        old = None
        try:
            if self.out_dir.exists():
                old = Path(tempfile.mkdtemp(prefix=_prefix(self.out_dir.name, "old"),
                                            dir=self.out_dir.parent))
                os.rename(self.out_dir, old / "previous")
            os.chmod(self.path, 0o777 & ~umask())  # mkdtemp made it 0700
            os.rename(self.path, self.out_dir)
        except OSError as exc:
            raise OutputDirError(f"cannot publish {self.out_dir}: {exc.strerror or exc}",
                                 model=self.label) from None
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def out_lock(directory: Path, label: Optional[str] = None) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on the directory itself (POSIX only; a lock on the
    directory leaves no lock file in OUT): runs writing into one OUT at once take turns at
    publishing and at merging summary.json."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise OutputDirError(f"cannot lock the output directory {directory}: "
                             f"{exc.strerror or exc}", model=label) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _check_replaceable(out_dir: Path, label: Optional[str] = None) -> None:
    if not out_dir.is_dir():
        return
    entries = list(out_dir.iterdir())
    if entries and not (out_dir / "manifest.json").is_file():
        raise OutputDirError(f"{out_dir} exists and is not an mrvl_convert artifact directory "
                             "(no manifest.json); refusing to replace it", model=label)


class _Terminated(BaseException):
    """SIGTERM arrived while a staging directory was open (a BaseException, like Ctrl-C)."""


class _HeldSigterm:
    """While ``holding``, our SIGTERM handler only remembers a SIGTERM (``release`` says
    whether one came). Not a signal mask: another thread (onnxruntime's, OpenBLAS') would
    take the signal, and Python runs the handler in the main thread all the same."""

    def __init__(self) -> None:
        self.holding = False
        self.pending = False

    def release(self) -> bool:
        self.holding = False
        pending, self.pending = self.pending, False
        return pending


_HELD_SIGTERM = _HeldSigterm()


def _on_sigterm(signum, frame) -> None:
    if _HELD_SIGTERM.holding:
        _HELD_SIGTERM.pending = True
        return
    raise _Terminated()


def _catch_sigterm() -> object:
    """Turn SIGTERM into _Terminated while staging, unless someone else handles it already.
    Only the main thread may set handlers; other threads keep the default."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        return None
    signal.signal(signal.SIGTERM, _on_sigterm)
    return previous


def _restore_sigterm(previous: object) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _fresh_names(parent: Path, prefix: str) -> Iterator[Path]:
    """Candidate staging paths, random as ``tempfile.mkdtemp``'s."""
    for _ in range(tempfile.TMP_MAX):
        yield parent / f"{prefix}{secrets.token_hex(4)}"
    raise FileExistsError(f"no free staging name {prefix}* in {parent}")


def _prefix(name: str, kind: str) -> str:
    return f".{name}.{kind}-{os.getpid()}-"


def clean_stale(parent: Path, name: str) -> List[Path]:
    """Remove ``.<name>.tmp-<pid>-*`` / ``.<name>.old-<pid>-*`` left by processes that are gone
    (killed mid-write). A live process's staging directory, another run's included, stays."""
    pattern = re.compile(rf"\.{re.escape(name)}\.(?:tmp|old)-([0-9]{{1,10}})-")
    removed = []
    for entry in parent.iterdir():
        found = pattern.match(entry.name)
        if found and entry.is_dir() and not entry.is_symlink() and not _alive(int(found[1])):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or a number we cannot ask about): keep it
    return True


def umask() -> int:
    """The process umask, read without changing it (Linux), else by setting it back at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def write_file_atomically(target: Path, data: bytes) -> Path:
    """Write ``data`` to ``target`` through a temp file in the same directory renamed over it:
    a reader sees the old file or the whole new one, never a part (OutputDirError if not)."""
    if target.is_dir() and not target.is_symlink():
        raise OutputDirError(f"cannot write {target}: it is a directory")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o666 & ~umask())  # mkstemp made it 0600
            handle.write(data)
        os.replace(tmp, target)
    except OSError as exc:
        raise OutputDirError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return target
