"""The test suite's layout: tests/<package>/test_<module>.py mirror mrvl_convert, whole-system tests
sit in tests/system/, and every shared helper or strategy lives in tests/support/. A test module
imports only ``support``, the standard library, installed distributions and ``mrvl_convert``:
never another test module, nor a name from a conftest.py, so each one imports on its own.

The checks read the sources (ast); importing every module in a fresh interpreter is the one
``slow`` test at the end. A planted tree shows each check can fail."""
from __future__ import annotations

import ast
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Set

import pytest

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = "support"


def _test_modules(tests: Path) -> List[Path]:
    return sorted(tests.rglob("test_*.py"))


def _imported_names(path: Path) -> Iterator[tuple]:
    """(line, dotted module, relative level) of every import statement, nested ones included."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, 0
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, node.module or "", node.level


def _installed_top_level() -> Set[str]:
    return set(importlib.metadata.packages_distributions())


def _support_module_exists(tests: Path, dotted: str) -> bool:
    """``support.a.b`` names tests/support/a/b.py or the package tests/support/a/b/."""
    base = tests.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _import_problem(tests: Path, dotted: str, level: int, installed: Set[str]) -> str:
    """Why an import of a test module under ``tests`` is not allowed ("" when it is)."""
    if level:
        return "a relative import (test folders are no packages)"
    top = dotted.split(".")[0]
    if top == "conftest":
        return "a name from conftest.py (fixtures reach tests by name, helpers live in support/)"
    if top == SUPPORT:
        return "" if _support_module_exists(tests, dotted) else f"no module {dotted} in {tests}"
    if importlib.machinery.PathFinder.find_spec(top, [str(tests)]) is not None:
        return f"{top} is a module of the test tree, not of {SUPPORT}/"
    if top == "mrvl_convert" or top in sys.stdlib_module_names or top in installed:
        return ""
    spec = importlib.util.find_spec(top)
    if spec is None:
        return f"{top} is neither {SUPPORT}, the standard library, installed, nor mrvl_convert"
    places = [spec.origin or ""] + list(spec.submodule_search_locations or [])
    if any(p and Path(p).resolve().is_relative_to(tests) for p in places):
        return f"{top} resolves into the test tree ({places[0] or places[-1]})"
    return ""


def import_problems(tests: Path) -> List[str]:
    """Every import of a tests/**/test_*.py or a support/ module that does not resolve to an
    allowed place."""
    installed = _installed_top_level()
    found = []
    for path in _test_modules(tests) + sorted((tests / SUPPORT).rglob("*.py")):
        for line, dotted, level in _imported_names(path):
            why = _import_problem(tests, dotted, level, installed)
            if why:
                found.append(f"{path.relative_to(tests)}:{line}: import {dotted or '.'}: {why}")
    return found


def stray_helpers(tests: Path) -> List[str]:
    """Python files under ``tests`` that are neither test modules, conftest.py, nor in support/."""
    return sorted(str(p.relative_to(tests)) for p in tests.rglob("*.py")
                  if not p.name.startswith("test_") and p.name != "conftest.py"
                  and p.relative_to(tests).parts[0] != SUPPORT)


def repeated_basenames(tests: Path) -> List[str]:
    """pytest's default import mode imports a test module by its basename: two in different
    folders would collide (pyproject.toml says why this mode)."""
    seen: dict = {}
    for path in _test_modules(tests):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    return sorted(f"{name}: {places}" for name, places in seen.items() if len(places) > 1)


def test_modules_import_only_support_stdlib_installed_and_the_package() -> None:
    assert import_problems(TESTS) == []


def test_helpers_live_in_support() -> None:
    assert stray_helpers(TESTS) == []


def test_test_module_names_are_unique() -> None:
    assert repeated_basenames(TESTS) == []


def test_test_folders_name_packages() -> None:
    """tests/<package>/ for a package of mrvl_convert; besides them only architecture/ and
    system/ (and support/, which holds no test module)."""
    packages = {p.parent.name for p in (TESTS.parent / "mrvl_convert").glob("*/__init__.py")}
    folders = {p.relative_to(TESTS).parts[0] for p in _test_modules(TESTS)
               if len(p.relative_to(TESTS).parts) > 1}
    assert folders - packages == {"architecture", "system"}
    assert not list((TESTS / SUPPORT).rglob("test_*.py"))
    top_modules = {f"test_{p.stem}.py" for p in (TESTS.parent / "mrvl_convert").glob("*.py")}
    # tests/test_<module>.py only for a module directly in mrvl_convert/ (convert, options...)
    assert [p.name for p in TESTS.glob("test_*.py") if p.name not in top_modules] == []


def test_system_tests_are_marked() -> None:
    unmarked = [p.name for p in (TESTS / "system").glob("test_*.py")
                if "pytestmark = pytest.mark.system" not in p.read_text(encoding="utf-8")]
    assert unmarked == []


def _plant(root: Path) -> Path:
    """A tests tree with one of each fault: a test module importing another one, one importing
    from conftest, one importing an unknown module, a helper outside support/, and two test
    modules of one basename."""
    tests = root / "tests"
    (tests / "support").mkdir(parents=True)
    (tests / "support" / "__init__.py").write_text("")
    (tests / "support" / "models.py").write_text("")
    (tests / "alpha").mkdir()
    (tests / "beta").mkdir()
    (tests / "conftest.py").write_text("")
    (tests / "helpers.py").write_text("")
    (tests / "alpha" / "test_one.py").write_text(
        "import json\nimport pytest\nimport mrvl_convert\nfrom support.models import Builder\n")
    (tests / "alpha" / "test_two.py").write_text(
        "from conftest import something\nimport helpers\n")
    (tests / "beta" / "test_one.py").write_text(
        "from alpha import test_one\nimport no_such_module_anywhere_xyz\nfrom support.nothing "
        "import x\n")
    return tests


def test_the_checks_fail_on_a_planted_tree(tmp_path: Path) -> None:
    tests = _plant(tmp_path)
    problems = "\n".join(import_problems(tests))
    assert "alpha/test_one.py" not in problems
    for needle in ("alpha/test_two.py:1: import conftest", "alpha/test_two.py:2: import helpers",
                   "beta/test_one.py:1: import alpha", "no_such_module_anywhere_xyz",
                   "support.nothing"):
        assert needle in problems, problems
    assert stray_helpers(tests) == ["helpers.py"]
    assert repeated_basenames(tests) == [
        "test_one.py: ['alpha/test_one.py', 'beta/test_one.py']"]


_IMPORT_ALONE = """
import importlib.util, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location(sys.argv[3], sys.argv[2])
module = importlib.util.module_from_spec(spec)
sys.modules[sys.argv[3]] = module  # as an import does: a dataclass looks its module up there
spec.loader.exec_module(module)
"""


@pytest.mark.slow
def test_every_test_module_imports_alone_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """Without pytest, its conftest or the folders pytest puts on sys.path: tests/ alone."""
    failed = {}
    for path in _test_modules(TESTS):
        done = subprocess.run([sys.executable, "-c", _IMPORT_ALONE, str(TESTS), str(path),
                               path.stem], cwd=tmp_path, env=dict(os.environ),
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            failed[str(path.relative_to(TESTS))] = done.stderr[-1500:]
    assert failed == {}
