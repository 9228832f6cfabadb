"""The package layout is the pipeline: imports point only down the stages, no circles, no private
names across packages. The contracts live in pyproject.toml ([tool.importlinter]) and are
checked with import-linter; a planted circle shows the check can fail."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mrvl_convert"


def _lint(root: Path) -> "subprocess.CompletedProcess[str]":
    """import-linter on the package found first on ``root`` (a fresh process: grimp imports it)."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}))")
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=300)


def test_contracts_hold() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.mark.parametrize("importer, imported", [
    ("core/graph.py", "mrvl_convert.layers"),              # a foundation reaching up: layers
    ("runtime/simulator.py", "mrvl_convert.runtime.session"),  # a circle inside runtime
    ("emit/documents.py", "mrvl_convert.layers._kind"),    # a private module from outside
])
def test_a_planted_violation_fails(tmp_path: Path, importer: str, imported: str) -> None:
    copy = tmp_path / "mrvl_convert"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "schemas"))
    target = copy / importer
    target.write_text(target.read_text() + f"\n\nimport {imported}  # planted\n")
    done = _lint(tmp_path)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "BROKEN" in done.stdout


def _private_imports() -> List[Tuple[str, str]]:
    """(module, name) for every ``from mrvl_convert.X... import _name`` whose module lies in
    another top-level package than the importer's."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        importer = path.relative_to(ROOT).with_suffix("").parts
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                    "mrvl_convert."):
                continue
            source = node.module.split(".")
            if source[:2] == list(importer[:2]):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append((".".join(importer), f"{node.module}.{alias.name}"))
    return found


def test_no_private_name_crosses_a_package() -> None:
    assert _private_imports() == []


def test_top_level_holds_at_most_eight_modules() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 8, modules


def test_no_source_file_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def test_every_package_is_installed() -> None:
    """pyproject.toml lists packages one by one: a new folder missing there works in an editable
    install and is absent from a wheel."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE.rglob("__init__.py")}
    assert found - listed == set()
