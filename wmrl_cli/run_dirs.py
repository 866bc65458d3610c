"""Run directories: what made a run (its record), when a command may resume, replace or must
refuse one, and what a run owns (only what wmrl wrote into it). The rules are in docs/cli.md,
"Run directories" and "What a run owns"."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

from wmrl_cli.config import RunConfig, dump_config
from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_text, keep_when_replaced

# Run directories this process created, removed again if the command fails on a user error
# before it wrote anything but config.yaml (`discard_unused_run_dirs`).
_CREATED: list[Path] = []


def make_run_dir(run_dir: Path) -> Path:
    """Create `run_dir` (and its parents), with one-line errors for a path that is a file or
    cannot be written; remembered for `discard_unused_run_dirs` when it is new."""
    from wmrl_cli.errors import ConfigError

    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"--out {run_dir}: is a file, expected a run directory")
    existed = run_dir.is_dir()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"--out {run_dir}: cannot create or write this directory ({reason})"
        ) from None
    if not existed:
        _CREATED.append(run_dir)
    return run_dir


def expect_run_dir(run_dir: Path) -> None:
    """A run directory that this command's ranks will create (`--num-processes`): where it
    does not exist yet, remembered for `discard_unused_run_dirs` as if this process made it, so
    that ranks failing on a user error leave nothing behind even where they were stopped before
    their own cleanup."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        _CREATED.append(run_dir)


def prepare_run_dir(
    config: RunConfig,
    command: str,
    default: Path | None = None,
    *,
    overwrite: bool = False,
    record: dict | None = None,
) -> Path:
    """Create the run directory, claim it for `command` (`own_run_dir`) and write the resolved
    `config.yaml` and the run record into it. `overwrite`: an earlier run of the same command
    there is removed first (only the files it wrote)."""
    import json

    run_dir = Path(
        config.output_dir or default or Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    owned = own_run_dir(run_dir, command, overwrite=overwrite)
    run_dir = make_run_dir(run_dir)
    config.output_dir = run_dir
    atomic_write_text(run_dir / "config.yaml", dump_config(config))
    body = dict(record or run_record(config, command))
    body.update(owned)
    atomic_write_text(run_dir / RUN_RECORD, json.dumps(body, indent=1))
    _OPEN.append(run_dir)
    return run_dir


def discard_unused_run_dirs() -> None:
    """After a user error: remove the run directories this process created that hold nothing
    but config.yaml and the run record (and empty folders), so that bad inputs leave nothing
    behind."""
    from wmrl_cli.logging import close_open_loggers

    close_open_loggers()  # a failed run's TensorBoard writer must not outlive its folder
    while _CREATED:
        run_dir = _CREATED.pop()
        if not run_dir.is_dir():
            continue
        metrics = run_dir / "metrics.jsonl"
        logged = metrics.is_file() and metrics.stat().st_size > 0
        # A metrics logger opened before the error leaves an empty metrics.jsonl and the header
        # of a TensorBoard events file: nothing of a run.
        unused = (run_dir / "config.yaml", run_dir / RUN_RECORD, metrics)
        files = [p for p in run_dir.rglob("*") if not p.is_dir()]
        if not logged and all(
            p in unused or p.relative_to(run_dir).parts[0] == "tensorboard" for p in files
        ):
            shutil.rmtree(run_dir, ignore_errors=True)


# -- the run-directory rule ---------------------------------------------------------------------
#
# A run directory records what made it (RUN_RECORD: the command, the resolved config and the
# fingerprints of its inputs). Running again with the same record resumes; a different one stops
# with one line naming what differs, unless --resume (continue with the recorded config) or
# --overwrite (start over) is given.

RUN_RECORD = "run.json"
# Settings that change how a run is carried out or logged, not what it computes.
_FREE_KEYS = ("output_dir", "assets_dir", "num_threads", "lerobot.cache_dir")
_FREE_PREFIXES = ("logging.",)
_FREE_SUFFIXES = (".save_every", ".keep_checkpoints", ".log_every")
_HASHED_BYTES = 64 * 2**20  # larger files are fingerprinted by size and modification time


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


# Sections a command never reads, free to differ between its attempts and in no fingerprint:
# co-evolve makes its own data, so how a LeRobot dataset is read is not its concern.
_UNREAD: dict[str, tuple[str, ...]] = {"co-evolve": ("lerobot.",)}


def _free(key: str, command: str) -> bool:
    """Whether `key` may differ between attempts at one run. A training command's step count
    may (more steps continue the run from its checkpoint); co-evolve's may not (its finished
    stages are kept as they are)."""
    if command != "co-evolve" and key.endswith(".steps"):
        return True
    if key.startswith(_UNREAD.get(command, ())):
        return True
    return key in _FREE_KEYS or key.startswith(_FREE_PREFIXES) or key.endswith(_FREE_SUFFIXES)


def config_values(config: RunConfig, keys: tuple[str, ...] | None, command: str) -> dict[str, Any]:
    """The flattened config entries a computation reads: those equal to one of `keys` or under
    it (`world_model` covers `world_model.lr`; None: all), bookkeeping keys left out (`_free`)."""
    import yaml

    flat = _flatten(yaml.safe_load(dump_config(config)))
    return {
        key: value
        for key, value in sorted(flat.items())
        if not _free(key, command) and (keys is None or covers(keys, key))
    }


def covers(keys: tuple[str, ...], key: str) -> bool:
    """Whether `key` is one of `keys` or lies under one of them."""
    return any(key == k or key.startswith(f"{k}.") for k in keys)


def fingerprint(path: str | Path) -> str | None:
    """sha256 over a file's or a directory's files (relative names and contents; files over
    64 MiB by size and modification time); None for a path that does not exist."""
    import hashlib

    path = Path(path)
    if not path.exists():
        return None
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(path) if file != path else file.name).encode())
        stat = file.stat()
        if stat.st_size > _HASHED_BYTES:
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
            continue
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
    return digest.hexdigest()


def run_record(config: RunConfig, command: str, inputs: dict[str, Any] | None = None) -> dict:
    import yaml

    return {
        "command": command,
        "config": yaml.safe_load(dump_config(config)),
        "inputs": {
            key: {"path": str(path), "sha256": fingerprint(path)}
            for key, path in (inputs or {}).items()
            if path is not None
        },
    }


def _read_record(run_dir: Path) -> dict | None:
    """The run's record; for a run made before records existed, its config.yaml alone."""
    import json

    import yaml

    try:
        if (run_dir / RUN_RECORD).is_file():
            return json.loads((run_dir / RUN_RECORD).read_text())
        if (run_dir / "config.yaml").is_file():
            return {"config": yaml.safe_load((run_dir / "config.yaml").read_text())}
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return None


def record_differences(old: dict, new: dict) -> list[str]:
    """What differs between two run records, one short phrase per key. A setting the old record
    lacks (added to wmrl after the run was made) differs only where the new value is not the
    setting's default: a new option's default keeps what runs did before it existed."""
    import yaml

    out = []
    if old.get("command", new["command"]) != new["command"]:
        out.append(f"command {old['command']} -> {new['command']}")
    before, after = _flatten(old.get("config") or {}), _flatten(new["config"])
    defaults = None
    for key in sorted(set(before) | set(after)):
        if _free(key, new["command"]) or before.get(key) == after.get(key):
            continue
        if key not in before and old.get("config"):
            defaults = defaults or _flatten(yaml.safe_load(dump_config(RunConfig())))
            if key in defaults and defaults[key] == after.get(key):
                continue
        out.append(f"{key} {before.get(key)!r} -> {after.get(key)!r}")
    old_inputs = old.get("inputs") or {}
    for key, item in new["inputs"].items():
        prior = old_inputs.get(key)
        if prior is None:
            continue
        if prior.get("path") != item["path"]:
            out.append(f"{key} {prior.get('path')} -> {item['path']}")
        elif prior.get("sha256") != item["sha256"]:
            out.append(f"{key} (the files in {item['path']} changed)")
    return out


def adopt_recorded_config(config: RunConfig, default: Path) -> bool:
    """--resume: copy the config recorded in the run directory (`config.output_dir`, else
    `default`) into `config`, so that inputs are checked as the run named them; False when
    there is no recorded run."""
    run_dir = Path(config.output_dir or default)
    old = _read_record(run_dir) if run_dir.is_dir() else None
    if old is None or not old.get("config"):
        return False
    _adopt(config, old["config"])
    config.output_dir = run_dir
    return True


def _adopt(config: RunConfig, recorded: dict) -> None:
    """Copy a recorded config into `config`, all but its output directory."""
    kept = type(config).model_validate(recorded)
    for field in type(config).model_fields:
        if field != "output_dir":
            setattr(config, field, getattr(kept, field))


def _how_to_resume(run_dir: Path, differ: list[str]) -> str:
    """The advice for a run whose record differs: what resumes it as it was made (its recorded
    settings, the files it was made from), else --resume."""
    changed = [phrase for phrase in differ if phrase.endswith(" changed)")]
    steps = []
    if len(changed) < len(differ):
        steps.append(f"run it with the settings it recorded ({run_dir / 'config.yaml'})")
    if changed:
        steps.append("restore the files it was made from")
    on_now = " on the files as they are now" if changed else ""
    return (
        f"to resume it, {' and '.join(steps)}; or pass --resume to continue it with its recorded "
        f"configuration{on_now}"
    )


def default_run_dir(command: str, preset: str | None = None) -> Path:
    """runs/<command>[-<preset>]: the same command run again finds its run and resumes it. A
    run's own config.yaml as the preset names the run by its folder (runs/train-policy-stage1)."""
    stem = None if not preset else Path(preset).stem
    if stem == "config":
        stem = Path(preset).resolve().parent.name or stem
    name = command if not stem else f"{command}-{stem}"
    return Path("runs") / name


def claim_run_dir(
    config: RunConfig,
    command: str,
    *,
    default: Path,
    inputs: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    update: bool = False,
    write: bool = True,
) -> Path:
    """Apply the run-directory rule to `config.output_dir` (else `default`): a new or matching
    run directory is used as it is (a matching one resumes); one whose record differs stops
    with a one-line ConfigError naming the differences, unless `resume` (the recorded config is
    copied into `config`, the command's differing settings are ignored) or `overwrite` (the
    directory is emptied) or `update` (co-evolve: the new config is adopted, and the pipeline
    reruns the stages it affects). `write`: create it and write config.yaml and the record
    (False on the ranks other than the main one, which only adopt the config)."""
    from wmrl_cli.errors import ConfigError
    from wmrl_cli.logging import console

    if resume + overwrite + update > 1:
        raise ConfigError("--resume, --overwrite and --update exclude each other: pass one")
    run_dir = Path(config.output_dir or default)
    config.output_dir = run_dir
    if write or "WORLD_SIZE" not in os.environ:  # ranks other than the main one only adopt
        own_run_dir(run_dir, command, check_only=True)
    old = _read_record(run_dir) if run_dir.is_dir() else None
    wipe = False
    if old is not None:
        differ = record_differences(old, run_record(config, command, inputs))
        if differ and overwrite:
            wipe = True
        elif differ and resume:
            _adopt(config, old["config"])
            console.print(
                f"notice: resuming {run_dir} with its recorded configuration; ignored: "
                + "; ".join(differ)
            )
        elif differ and update:
            console.print(
                f"notice: updating {run_dir} to this configuration ({'; '.join(differ)}); the "
                "stages these settings affect run again, the others are kept"
            )
        elif differ:
            shown = "; ".join(differ[:5]) + (f" (and {len(differ) - 5} more)" if differ[5:] else "")
            also = (
                ", --update to keep the stages these settings do not affect and rerun the rest"
                if command == "co-evolve"
                else ""
            )
            raise ConfigError(
                f"--out {run_dir} holds a run made otherwise ({shown}); "
                f"{_how_to_resume(run_dir, differ)}, --overwrite to start over{also}, or "
                "choose another --out"
            )
        elif overwrite:
            wipe = True
    if write:
        # --resume keeps the record the run was started with (a pre-record run gets one now)
        kept = old is not None and resume and "command" in old
        record = old if kept else run_record(config, command, inputs)
        prepare_run_dir(config, command, default=run_dir, overwrite=wipe, record=record)
    return run_dir


# -- what a run owns ----------------------------------------------------------------------------
#
# A run directory owns only what wmrl wrote into it, at every depth. Its record keeps the paths
# the run created (`files`: its files and empty folders, relative to the run) and the ones it
# found there and leaves alone (`foreign`); a path covers what lies under it (a record written
# before paths were kept at every depth names top-level folders whole). `active` is true while a
# command writes. --overwrite removes the run's own paths and then the folders they leave
# empty, nothing else; a folder wmrl replaces whole (policy/, a checkpoint) carries the user's
# files into its new copy (files.keep_when_replaced). A path that appeared while no command ran
# is the user's; one that appeared while a command was killed (active still true) is the run's.

_TRANSIENT = (".tmp-", ".old-", ".write-test-")
_OPEN: list[Path] = []  # run directories this process writes; closed by `close_run_dirs`


def _transient(name: str) -> bool:
    return name.startswith(_TRANSIENT) or name.endswith(".tmp")


def _entries(run_dir: Path) -> set[str]:
    """The top-level names in `run_dir`, a write in progress left out."""
    if not run_dir.is_dir():
        return set()
    return {p.name for p in run_dir.iterdir() if not _transient(p.name)}


def _leaves(run_dir: Path) -> set[str]:
    """Every file and empty folder under `run_dir`, as a relative posix path; a write in
    progress left out, links not followed."""
    out: set[str] = set()
    if not run_dir.is_dir():
        return out
    for folder, dirs, files in os.walk(run_dir):
        dirs[:] = [d for d in dirs if not _transient(d)]
        here = Path(folder).relative_to(run_dir)
        names = [f for f in files if not _transient(f)]
        out.update((here / name).as_posix() for name in names)
        if not names and not dirs and here != Path("."):
            out.add(here.as_posix())
    return out


def _covered(path: str, by: set[str]) -> bool:
    """Whether `path` is one of `by` or lies under one of them."""
    parts = path.split("/")
    return any("/".join(parts[:i]) in by for i in range(1, len(parts) + 1))


def _protected(run_dir: Path, present: set[str]) -> str | None:
    """Why `run_dir` can never be a run directory wmrl creates, or None; the current directory
    may be one while it is empty (`--out .` in a new folder)."""
    where = run_dir.resolve()
    if where == Path.cwd().resolve() and present:
        return "is the current directory"
    if where == Path.home().resolve():
        return "is your home directory"
    if where == Path(where.anchor):
        return "is the file system's root"
    return None


def own_run_dir(
    run_dir: Path, command: str, *, overwrite: bool = False, check_only: bool = False
) -> dict[str, Any]:
    """Check that `command` may write into `run_dir` and return the ownership fields of its
    record (`files`, `foreign`, `active`). Refused in one line (ConfigError): a directory wmrl did
    not create (the current or home directory, or one holding other files), and another
    command's run. `overwrite`: the earlier run's own files are removed (never the others)."""
    from wmrl_cli.errors import ConfigError

    run_dir = Path(run_dir)
    old = _read_record(run_dir) if run_dir.is_dir() else None
    present = _entries(run_dir)
    if old is None:
        why = _protected(run_dir, present) if run_dir.is_dir() else None
        if why or present:
            shown = ", ".join(sorted(present)[:3]) + (", ..." if len(present) > 3 else "")
            reason = why or f"holds files wmrl did not write ({shown})"
            raise ConfigError(
                f"--out {run_dir} {reason}; choose a new or empty directory for this run"
            )
        return {"files": [], "foreign": [], "active": True}
    if _family(old.get("command", command)) != _family(command):
        raise ConfigError(
            f"--out {run_dir} holds a {old['command']} run; choose another --out for this "
            f"{command} (nothing there is replaced)"
        )
    files, foreign = _ownership(old, _leaves(run_dir))
    if not check_only:
        keep_when_replaced(run_dir / path for path in foreign)
    if overwrite and not check_only:
        for path in sorted(files):
            _remove(run_dir / path)
        _remove_empty_folders(run_dir, keep=foreign)
        files = set()
    return {"files": sorted(files), "foreign": sorted(foreign), "active": True}


def _family(command: str) -> str:
    """Evaluations of every kind (eval, eval-wm, eval-rm) share their directories' rule."""
    return "eval" if command.startswith("eval") else command


def _ownership(old: dict, present: set[str]) -> tuple[set[str], set[str]]:
    """The run's paths and the user's, from its record and the paths the directory holds now
    (`_leaves`). A run recorded before ownership existed owns everything."""
    if "files" not in old:
        return set(present), set()
    files, foreign = set(old["files"]), set(old.get("foreign", []))
    theirs, ours = set(), set()
    for path in present:
        if _covered(path, foreign):
            theirs.add(path)
        elif _covered(path, files) or old.get("active"):
            ours.add(path)  # an unknown path: written by a command killed before it closed
        else:
            theirs.add(path)
    return ours, theirs


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _remove_empty_folders(run_dir: Path, keep: set[str]) -> None:
    """After the run's files are removed: the folders they leave empty, deepest first (an
    empty folder the user made, recorded in `keep`, stays)."""
    for folder, _dirs, _files in sorted(os.walk(run_dir), key=lambda w: -len(w[0])):
        path = Path(folder)
        relative = path.relative_to(run_dir).as_posix()
        if path != run_dir and not any(path.iterdir()) and relative not in keep:
            path.rmdir()


def close_run_dirs() -> None:
    """When a command ends (in any way but kill -9): each run directory it wrote records the
    names it now owns, and that no command is writing it."""
    import json

    while _OPEN:
        run_dir = _OPEN.pop()
        record = _read_record(run_dir)
        if record is None or "files" not in record:
            continue
        present = _leaves(run_dir)
        kept = set(record.get("foreign", []))
        foreign = {path for path in present if _covered(path, kept)}
        record.update(files=sorted(present - foreign), foreign=sorted(foreign), active=False)
        # On failure the record stays active: its names are still the run's on the next start.
        with contextlib.suppress(WmrlError):
            atomic_write_text(run_dir / RUN_RECORD, json.dumps(record, indent=1))


def write_rank_summary(run_dir: Path, rank: int, tensors: dict[str, Any], **extra: Any) -> None:
    """RUN/ranks/rank_N.json: a sha256 of this rank's tensors (by name, as float32) and `extra`,
    for checking that data-parallel ranks hold the same weights."""
    import hashlib
    import json

    digest = hashlib.sha256()
    for _, tensor in sorted(tensors.items()):
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    body = {"rank": rank, "weights_sha256": digest.hexdigest(), **extra}
    path = Path(run_dir) / "ranks" / f"rank_{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(body, indent=1))
