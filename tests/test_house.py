"""The rules of the house that code can check (docs/architecture.md): every import of wmrl_cli's
own modules, at the top of a file or inside a function, goes to the same package or a floor
below; no files import each other in a circle; no file is over 600 lines. And the tests' own:
their folders mirror the package and are packages; no test module imports another (nor a
conftest): what tests share is a fixture or lives in tests/helpers/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "wmrl_cli"
MAX_LINES = 600

# Ground floor first; the packages (or modules) on one floor import none of each other.
FLOORS: list[tuple[str, ...]] = [
    ("errors",),
    ("files",),
    ("trackers",),
    ("logging",),
    ("config",),
    ("runtime", "run_dirs", "ranks"),
    ("world_models", "rewards"),
    ("data",),
    ("envs", "assets"),
    ("sims",),
    ("policies",),
    ("evaluation",),
    ("training",),
    ("memory",),
    ("rl",),
    ("jobs",),
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


# -- the tests' own rules ------------------------------------------------------------------

# Test folders besides the package's own: whole commands and pipelines, the benchmark scripts,
# the experiments' scripts, and what tests share that is not a fixture (not a test module:
# nothing there is collected).
TEST_FOLDERS = {"e2e", "benchmarks", "experiments", "helpers", "fixtures"}
# Data that tests read as it was made (a LeRobot dataset written by lerobot): folders, no code.
FIXTURES = TESTS / "fixtures"
# A string that is a module's dotted name, maybe with an attribute: what `python -m` runs, a
# worker's target ("tests.x.test_y:Name").
MODULE_STRING = re.compile(r"tests(?:\.\w+)+(?::[\w.]+)?")


def _is_test_module(name: str) -> bool:
    return name.startswith("test_") or name == "conftest"


def _test_module_references(source: str, path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every test module or conftest the file at `path` (under tests/)
    imports, at the top or inside a function, relative imports resolved, or names in a string;
    the file itself aside."""
    package = path.relative_to(TESTS.parent).with_suffix("").parts
    own = ".".join(package)
    names: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level] if node.level else ()
            module = ".".join([*base, *filter(None, (node.module or "").split("."))])
            names.append((node.lineno, module))
            names += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Constant) and MODULE_STRING.fullmatch(str(node.value)):
            names.append((node.lineno, node.value.partition(":")[0]))
    stems = {p.stem for p in TESTS.rglob("*.py") if _is_test_module(p.stem)}
    found = set()
    for line, name in names:
        parts = name.split(".")
        ours = parts[0] == "tests" or (len(parts) == 1 and name in stems)
        test_parts = [i for i, part in enumerate(parts) if _is_test_module(part)]
        module = ".".join(parts[: test_parts[0] + 1]) if test_parts else own
        if ours and module != own:
            found.add((line, module))
    return sorted(found)


def test_no_test_module_imports_another() -> None:
    found = [
        f"{path.relative_to(TESTS.parent)}:{line} {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, name in _test_module_references(path.read_text(encoding="utf-8"), path)
    ]
    assert not found, (
        "test modules or conftests imported or named (a fixture in a conftest.py, or a helper in "
        "tests/helpers/, instead):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("from tests.cli.test_sft import TINY", True),
        ("def f():\n    from tests.cli.test_sft import TINY", True),
        ("from .test_sft import TINY", True),
        ("from ..envs import test_verified", True),
        ("import tests.conftest", True),
        ("from tests.conftest import small_sim_config", True),
        ("from test_sft import TINY", True),
        ('Worker("tests.cli.test_output_hygiene:_Probe", {})', True),
        ('cmd = ["-m", "tests.e2e.test_co_evolve"]', True),
        ('Worker("tests.cli.test_train_policy:_Probe", {})', False),  # the file itself
        ("from tests.helpers.sft import TINY, run_sft", False),
        ("from torch.testing import assert_close", False),
        ('cmd = ["-m", "tests.helpers.kill_at"]', False),
    ],
)
def test_a_test_module_import_is_caught(source: str, caught: bool) -> None:
    path = TESTS / "cli" / "test_train_policy.py"
    assert bool(_test_module_references(source, path)) == caught


def test_test_folders_mirror_the_package_and_are_packages() -> None:
    wings = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    folders = [p for p in sorted(TESTS.rglob("*")) if p.is_dir() and p.name[0] not in "_."]
    folders = [p for p in folders if FIXTURES not in p.parents]
    top = [p.name for p in folders if p.parent == TESTS]
    stray = sorted(set(top) - wings - TEST_FOLDERS)
    assert not stray, f"test folders that are no package of wmrl_cli/: {stray}"
    bare = [p for p in [TESTS, *folders] if not (p / "__init__.py").is_file()]
    bare = [str(p.relative_to(TESTS.parent)) for p in bare]
    assert not bare, f"test folders without an __init__.py (tests/__init__.py says why): {bare}"


def test_the_picture_draws_the_floors_enforced_here() -> None:
    """docs/images/house.py draws docs/images/house.png from its own list of floors: the same
    floors, in the same order, as FLOORS above (the picture had gone stale once already)."""
    import importlib.util

    path = PACKAGE.parent / "docs" / "images" / "house.py"
    spec = importlib.util.spec_from_file_location("house_picture", path)
    picture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(picture)
    drawn = [tuple(w.strip("/") for w in wings.split()) for wings, _, _ in picture.FLOORS]
    assert drawn == FLOORS[::-1]
