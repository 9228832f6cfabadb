"""How the commands end: their exit codes, and an error as one line on stderr, never a
traceback."""
from __future__ import annotations

import sys
from typing import Callable, Optional, Sequence

from mrvl_convert.errors import MrvlConvertError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_VERIFY_FAILED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
REPORT_BUG = "please report it with the model at the project's issue tracker"

Entry = Callable[[Optional[Sequence[str]]], int]


def internal_error_line(exc: BaseException) -> str:
    """What the user sees of a bug: one line that says so, and where to report it."""
    text = " ".join(str(exc).split())[:300]
    return (f"internal error {type(exc).__name__}: {text} (a bug in mrvl_convert, not a problem "
            f"with your input; {REPORT_BUG})")


def guarded(entry: Entry, argv: Optional[Sequence[str]], prog: str) -> int:
    """Run a command's body: an error of ours that escaped it, or a bug, is one line on stderr
    and a non-zero exit, never a traceback."""
    try:
        return entry(argv)
    except MrvlConvertError as exc:
        error(str(exc), prog)
        return EXIT_FAILED
    except Exception as exc:  # a bug: say so (no traceback for the user to decode)
        error(internal_error_line(exc), prog)
        return EXIT_FAILED


def error(message: str, prog: str = "mrvl-convert") -> None:
    line = " ".join(message.split())
    sys.stderr.write(f"{prog}: {line}\n")
    sys.stderr.flush()
