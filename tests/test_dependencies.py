"""pyproject.toml matches the code: every import resolves to a declared distribution (or the standard
library, or this project), and every declared runtime distribution is imported somewhere."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib

from tests.conftest import REPO

CODE = ["mindflow", "assets", "jobs", "sensors", "definitions.py"]
OWN = {"mindflow", "assets", "jobs", "sensors", "definitions"}
# Extras that are not the running code's: the test suite's and the linter's.
NOT_RUNTIME = {"test", "dev"}
# Declared, needed at run time, and never imported by name, on purpose:
USED_WITHOUT_IMPORT = {
    "dagster-webserver": "the UI: `dagster dev` (make dev) and `dagster-webserver` are its commands",
}
# Imported when installed, with a fallback when not: not dependencies.
OPTIONAL_IMPORTS = {"tiktoken": "exact OpenAI token counts (mindflow/llm/chain.py); an estimate without it"}


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def _declared() -> dict[str, set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"base": {_name(r) for r in project["dependencies"]}}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        groups[extra] = {_name(r) for r in requirements}
    return groups


def _imports() -> dict[str, set[str]]:
    """Top-level module name -> the files importing it (lazy imports inside functions included)."""
    files = []
    for entry in CODE:
        path = REPO / entry
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    found: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    return found


@functools.cache
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    """The installed distributions that provide a top-level module."""
    return {_name(d) for d in _installed().get(module, [])}


def test_every_import_is_declared():
    groups = _declared()
    runtime = set().union(*(names for extra, names in groups.items() if extra not in NOT_RUNTIME))
    undeclared = {}
    for module, where in sorted(_imports().items()):
        if module in OWN or module in OPTIONAL_IMPORTS or module in sys.stdlib_module_names:
            continue
        provided_by = _distributions(module)
        assert provided_by, f"{module} (imported in {sorted(where)}) is not installed"
        if not provided_by & runtime:
            undeclared[module] = (sorted(provided_by), sorted(where))
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_every_runtime_dependency_is_imported():
    groups = _declared()
    imported = set()
    for module in _imports():
        imported |= _distributions(module)
    declared = groups["base"] | groups["server"]
    unused = sorted(declared - imported - set(USED_WITHOUT_IMPORT))
    assert not unused, f"declared in pyproject.toml but never imported: {unused}"
    # The allow-list holds only what is declared (a dependency dropped leaves no stale excuse).
    assert set(USED_WITHOUT_IMPORT) <= declared
