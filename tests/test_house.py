"""The rules of the house that code can check (docs/architecture.md): every import of wmrl_cli's
own modules, at the top of a file or inside a function, goes to the same package or a floor
below; no files import each other in a circle; no file is over 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "wmrl_cli"
MAX_LINES = 600

# Ground floor first; the packages (or modules) on one floor import none of each other.
FLOORS: list[tuple[str, ...]] = [
    ("errors",),
    ("files",),
    ("logging",),
    ("config",),
    ("world_models", "rewards"),
    ("runtime",),
    ("data",),
    ("envs", "assets"),
    ("sims",),
    ("policies",),
    ("evaluation",),
    ("training",),
    ("rl",),
    ("coevolve",),
    ("cli",),
    ("__main__",),
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every wmrl_cli import in the file, lazy ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("wmrl_cli"):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
                found += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("wmrl_cli")]
    return found


def _files() -> dict[str, Path]:
    return {_module(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module file an imported name lives in (`wmrl_cli.a.b.name` -> `wmrl_cli.a.b`)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _wing(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def test_every_package_is_on_a_floor() -> None:
    wings = {_wing(module) for module in _files() if module != "wmrl_cli"}
    assert wings <= set(FLOOR), f"not on a floor (docs/architecture.md): {wings - set(FLOOR)}"


def test_no_import_runs_up_a_floor() -> None:
    modules = _files()
    up = []
    for module, path in modules.items():
        if module == "wmrl_cli":
            continue
        wing = _wing(module)
        for line, name in _imports(path):
            target = _resolve(name, modules)
            if target is None or target == "wmrl_cli" or _wing(target) == wing:
                continue
            if FLOOR[_wing(target)] >= FLOOR[wing]:
                up.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    assert not up, "imports that do not go down a floor:\n" + "\n".join(up)


def test_no_files_import_each_other_in_a_circle() -> None:
    modules = _files()
    graph = {
        module: {t for _, name in _imports(path) if (t := _resolve(name, modules)) != module}
        for module, path in modules.items()
    }
    graph = {
        module: {t for t in targets if t and t != "wmrl_cli"} for module, targets in graph.items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                circles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_no_file_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in sorted(PACKAGE.rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines (a longer file holds more than one thing): {long}"
