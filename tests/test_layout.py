# test_layout.py: the shape of the Python package itself, on CPU: no module over 650 lines (none
# over 500 without its header saying why), no import cycle between its modules (every import
# counts, those inside functions too), and every module importable first in a fresh interpreter.
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import flashsdpa

PACKAGE = Path(flashsdpa.__file__).resolve().parent
MAX_LINES, EXPLAINED_LINES = 650, 500


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _header(source: str) -> str:
    """The leading comment block and the module docstring: where a module says what it owns."""
    comments = []
    for line in source.splitlines():
        if not line.startswith("#"):
            break
        comments.append(line)
    return "\n".join(comments) + "\n" + (ast.get_docstring(ast.parse(source)) or "")


def test_module_sizes() -> None:
    too_long, unexplained = [], []
    for name, path in MODULES.items():
        source = path.read_text()
        lines = source.count("\n")
        if lines > MAX_LINES:
            too_long.append(f"{name}: {lines} lines")
        elif lines > EXPLAINED_LINES and f"over {EXPLAINED_LINES} lines" not in _header(source).lower():
            unexplained.append(f"{name}: {lines} lines")
    assert too_long == [], f"modules over {MAX_LINES} lines: {too_long}"
    assert unexplained == [], f"over {EXPLAINED_LINES} lines, no 'Over 500 lines: why' in the header: {unexplained}"


def _resolve(importer: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The package modules an import statement loads (an attribute of a package counts as the
    package, a submodule named in `from X import Y` as the submodule)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in MODULES}
    base = node.module or ""
    if node.level:  # relative: from the importer's package
        package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    found = set()
    for alias in node.names:
        if f"{base}.{alias.name}" in MODULES:
            found.add(f"{base}.{alias.name}")
        elif base in MODULES:
            found.add(base)
    return found


def _import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _resolve(name, node)
        graph[name] = edges - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the path that closes it, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(graph[node]):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return None


def test_no_import_cycle() -> None:
    graph = _import_graph()
    # The graph sees what it should: cli reaches the benchmark, which reaches neither cli nor back.
    assert "flashsdpa.bench" in graph["flashsdpa.cli"] and "flashsdpa.info" in graph["flashsdpa.bench.report"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the search finds one


def _external_imports() -> list[str]:
    """Every module outside the package that the package imports (torch's included)."""
    names = set()
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
    return sorted(n for n in names if n.split(".")[0] != "flashsdpa" and n != "__future__")


# One interpreter imports what the package imports from outside (torch above all: a second or two
# per fresh interpreter, torch.nn.attention.bias alone pulls in Dynamo) and then forks a child per
# module, which imports that module before any other of the package: a fresh interpreter as far
# as flashsdpa is concerned, at a fraction of the cost of one process each.
_FORKING_IMPORTER = """
import importlib, os, sys, traceback
external, modules = sys.argv[1].split(), sys.argv[2:]
for name in external:
    try:
        importlib.import_module(name)
    except ImportError:
        pass  # optional (matplotlib, tqdm): the module that wants it copes
assert not any(m.split(".")[0] == "flashsdpa" for m in sys.modules), "the parent must not import flashsdpa"
failed = []
for name in modules:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        failed.append(name)
print("failed:", " ".join(failed))
sys.exit(1 if failed else 0)
"""


def test_each_module_imports_first() -> None:
    command = [sys.executable, "-c", _FORKING_IMPORTER, " ".join(_external_imports()), *MODULES]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_device_exports_committed() -> None:
    """scripts/dev/export_branch.sh puts a branch's tree in .branches/ for a device call, untracked
    but not ignored (the device copies only such files): a `git add -A` then commits a second copy
    of the repository (session 12 did, and rewrote the commits)."""
    root = PACKAGE.parent.parent
    if not (root / ".git").exists():
        return  # an installed copy, not a checkout: nothing to check
    tracked = subprocess.run(["git", "ls-files", ".branches"], cwd=root, capture_output=True, text=True, check=True)
    assert tracked.stdout == "", f"tracked files under .branches/: {tracked.stdout.splitlines()[:5]}"
