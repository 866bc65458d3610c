"""The docs a clone can act on: no work-log "session N" references and no paths of one machine
in the README, the docs, the package's code and presets, the benchmarks or the experiments; and
every fenced command in README.md, docs/ and the READMEs of benchmarks/ and experiments/ runs
something the repository ships (a `wmrl` command, a make target, a script in benchmarks/ or
experiments/) or is an ordinary set-up line from a short allowed list."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SESSION = re.compile(r"\bsessions?\s+\d|\bsession's", re.IGNORECASE)
MACHINE_PATH = re.compile(r"/tmp/|/work/|/root/|/home/")
# The project's planning notes are not in the repository: cite the public source instead.
PRIVATE_SOURCE = re.compile(
    r"REFERENCE\.md|REFERENCE's|shared/(ARCHITECTURE|MEASUREMENTS)\.md|shared/seeds"
)

# Ordinary shell, pip and git lines a fenced block may hold beside wmrl's own commands.
ALLOWED_FIRST_WORDS = {"cd", "export", "mkdir", "ls", "cp"}
ALLOWED_PREFIXES = (
    ("pip", "install"),
    ("python", "-m", "pip", "install"),
    ("git", "clone"),
    ("huggingface-cli", "download"),
    ("hf", "download"),
)
SHELL_BLOCK = re.compile(r"^```(bash|sh|console)\s*$")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
SCRIPT_FOLDERS = ("benchmarks/", "experiments/")


def doc_files() -> list[Path]:
    readmes = [
        ROOT / "benchmarks" / "README.md",
        *sorted((ROOT / "experiments").glob("*/README.md")),
    ]
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *readmes]


def checked_files() -> list[Path]:
    code = sorted((ROOT / "wmrl_cli").rglob("*.py"))
    presets = sorted((ROOT / "wmrl_cli" / "presets").glob("*.yaml"))
    scripts = [
        *sorted((ROOT / "benchmarks").rglob("*.py")),
        *sorted((ROOT / "experiments").rglob("*.py")),
    ]
    return [*doc_files(), *code, *presets, *scripts]


def offending_lines(pattern: re.Pattern, paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def fenced_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) of every command in the bash/sh/console blocks: a `$ ` prompt
    stripped, comments and blank lines skipped, a command's continuation lines (after a line
    ending in a backslash) joined to the line that starts it."""
    commands: list[tuple[int, str]] = []
    in_block, continued = False, False
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not in_block:
            in_block, continued = bool(SHELL_BLOCK.match(stripped)), False
            continue
        if stripped.startswith("```"):
            in_block = False
            continue
        line = stripped[2:] if stripped.startswith("$ ") else stripped
        if continued:
            start, command = commands[-1]
            commands[-1] = (start, command[:-1].rstrip() + " " + line)
        elif line and not line.startswith("#"):
            commands.append((number, line))
        else:
            continue
        continued = line.endswith("\\")
    return commands


def command_problem(line: str) -> str | None:
    """None when the line names a wmrl command, a repository script or an allowed line."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    while words and ENV_ASSIGNMENT.match(words[0]):  # MUJOCO_GL=egl wmrl ...
        words = words[1:]
    if not words:
        return "an environment assignment alone"
    first = words[0]
    if first in ("wmrl", "make") or first.endswith("/wmrl"):
        return None
    if first in ("accelerate", "torchrun") and "wmrl_cli" in words:
        return None
    if first in ALLOWED_FIRST_WORDS:
        return None
    if any(tuple(words[: len(p)]) == p for p in ALLOWED_PREFIXES):
        return None
    shell = first == "bash"
    if shell or first == "python" or first.endswith("/python") or first == "python3":
        if words[1:3] == ["-m", "wmrl_cli"]:
            return None
        script = next((w for w in words[1:] if not w.startswith("-")), None)
        suffix = ".sh" if shell else ".py"
        if script and script.startswith(SCRIPT_FOLDERS) and script.endswith(suffix):
            if (ROOT / script).is_file():
                return None
            return f"{script} is not in the repository"
    return "not a wmrl command, a repository script or an allowed set-up line"


def test_no_session_references() -> None:
    found = offending_lines(SESSION, checked_files())
    assert not found, "work-log 'session' references:\n" + "\n".join(found)


def test_no_citation_of_a_file_users_do_not_have() -> None:
    tests = sorted((ROOT / "tests").rglob("*.py"))
    found = offending_lines(PRIVATE_SOURCE, [*checked_files(), *tests])
    found = [line for line in found if not line.startswith("tests/test_docs.py")]
    assert not found, "cite the public source (a paper, a repository's file):\n" + "\n".join(found)


def test_no_machine_paths() -> None:
    found = offending_lines(MACHINE_PATH, checked_files())
    assert not found, "paths of one machine:\n" + "\n".join(found)


def test_fenced_commands_run_what_the_repository_ships() -> None:
    bad = []
    for path in doc_files():
        for number, line in fenced_commands(path.read_text(encoding="utf-8")):
            problem = command_problem(line)
            if problem:
                bad.append(f"{path.relative_to(ROOT)}:{number}: {line} ({problem})")
    assert not bad, "fenced commands:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "line",
    [
        "python scratch/filter_store.py runs/a runs/b",
        "python benchmarks/no_such_script.py --help",
        "python experiments/no-such-question/script.py",
        "CONFIRM=1 diag_fp.py runs/ce 20",
        "rm -rf runs",
    ],
)
def test_a_bad_fenced_command_is_caught(line: str) -> None:
    text = f"```bash\nwmrl --version\n{line}\nwmrl eval \\\n    --policy expert\n```\n"
    commands = [command for _, command in fenced_commands(text)]
    assert commands == ["wmrl --version", line, "wmrl eval --policy expert"]
    assert command_problem(line) is not None
    assert [command_problem(c) for c in commands if c != line] == [None, None]


@pytest.mark.parametrize(
    "text",
    ["session 12", "Session 3-5", "the session's run", "sessions 20-27", "/tmp/x", "/work/a"],
)
def test_a_session_reference_or_machine_path_is_caught(text: str) -> None:
    assert SESSION.search(text) or MACHINE_PATH.search(text)


def test_allowed_lines_pass() -> None:
    for line in [
        "MUJOCO_GL=egl wmrl co-evolve --out runs/co-evolve",
        "pip install -e '.[libero]'",
        "git clone https://github.com/x/y",
        "accelerate launch --num_processes 2 -m wmrl_cli train-policy --preset p",
        "torchrun --nproc_per_node 2 -m wmrl_cli train-wm --data d",
        "python -m wmrl_cli eval --policy expert",
        "python experiments/more-steps-on-a-gpu/policy_move.py --help",
        "python benchmarks/sim_fps.py --rounds 2",
        "hf download org/model --local-dir assets/model",
        "make test",
    ]:
        assert command_problem(line) is None, line
