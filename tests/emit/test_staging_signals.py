"""A staging directory (``emit.publish.StagingDir``) is removed whole after Ctrl-C, even when
SIGTERM (a pool ending its workers) comes during that removal."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path


def _staging(out: Path) -> list:
    return sorted(p.name for p in out.iterdir() if ".tmp-" in p.name)


_SIGTERM_DURING_CLEANUP = textwrap.dedent("""
    import os, shutil, signal, sys
    from pathlib import Path
    from mrvl_convert.emit import publish

    rmtree = shutil.rmtree

    def rmtree_after_sigterm(path, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # as the pool terminating its workers
        rmtree(path, **kwargs)

    publish.shutil.rmtree = rmtree_after_sigterm
    with publish.StagingDir(Path(sys.argv[1]) / "m") as staging:
        staging.write_bytes("a.bin", b"x" * 1000)
        raise KeyboardInterrupt
""")


def test_sigterm_during_the_cleanup_of_ctrl_c_waits_for_it(tmp_path: Path) -> None:
    """The directory is removed whole, then the process ends as SIGTERM would have."""
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_DURING_CLEANUP, str(tmp_path)],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[2])  # this checkout's mrvl_convert
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert _staging(tmp_path) == []
