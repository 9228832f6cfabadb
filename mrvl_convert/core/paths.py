"""One confinement rule for every path read out of a document (a manifest, a model's external data).

A path written inside a file is data an attacker may control: it is taken only as a plain
relative path that stays inside the directory of the file that names it, after symlinks are
resolved. Anything else is refused before the file is opened. Paths a user gives are compared
the same way, as real paths (``below``, ``real_entry``): a symlinked directory is seen through.
"""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Type

from mrvl_convert.errors import MrvlConvertError


def confined(base: "str | os.PathLike[str]", relative: object, *, what: str,
             error: Type[MrvlConvertError], **where: str) -> Path:
    """``base / relative`` resolved, or ``error`` saying why not.

    Refused: a non-string or empty path, a NUL byte, an absolute path (POSIX or Windows style),
    any ``..`` component, and a path whose resolved target (symlinks followed) is not inside
    ``base``. ``what`` names the field in the message; ``where`` (model=, node=, tensor=) is passed
    to the error. The target need not exist: the caller says what a missing file means.
    """
    if not isinstance(relative, str) or not relative:
        raise error(f"{what} must be a non-empty relative path, got {relative!r}", **where)
    if "\0" in relative:
        raise error(f"{what} {relative!r} contains a NUL byte", **where)
    posix, windows = PurePosixPath(relative), PureWindowsPath(relative)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or windows.root:
        raise error(f"{what} {relative!r} is an absolute path; only a path relative to "
                    f"{base} is allowed", **where)
    if ".." in posix.parts or ".." in windows.parts:
        raise error(f"{what} {relative!r} goes up a directory ('..'); only paths inside "
                    f"{base} are allowed", **where)
    root = Path(base).resolve()
    target = (root / relative).resolve()
    if target != root and root not in target.parents:
        raise error(f"{what} {relative!r} resolves to {target} (through a symlink), outside "
                    f"{root}", **where)
    return target


def real_entry(path: "str | os.PathLike[str]") -> Path:
    """Where the directory entry ``path`` is: the real path of its directory, and its own name.
    A symlinked file stays an entry of its own directory (a model under another name)."""
    path = Path(path)
    return Path(os.path.realpath(path.parent)) / path.name


def below(path: "str | os.PathLike[str]", directory: "str | os.PathLike[str]") -> bool:
    """True when the entry ``path`` is inside ``directory`` (at any depth), compared as real
    paths: ``link/out/m.onnx`` is below ``models/out`` when ``link`` is a symlink to ``models``."""
    return Path(os.path.realpath(directory)) in real_entry(path).parents
