"""Presets, `--set` overrides and validation, with one-line errors that name the key path."""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from wmrl_cli.config.schema import RunConfig
from wmrl_cli.errors import ConfigError

PRESET_SUFFIX = ".yaml"


def preset_dir() -> Path:
    """Presets ship inside the package so that an installed `wmrl` finds them."""
    return Path(str(resources.files("wmrl_cli") / "presets"))


def list_presets() -> dict[str, str]:
    """Preset name -> one-line description (the file's `description:` key)."""
    out: dict[str, str] = {}
    for path in sorted(preset_dir().glob(f"*{PRESET_SUFFIX}")):
        data = _read_yaml(path)
        out[path.stem] = str(data.get("description", ""))
    return out


def load_preset(name_or_path: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A preset's config mapping (without its description), by name or by file path. A preset
    may start from another (`inherits: NAME`): its sections update that preset's, key by key."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise ConfigError(
                f"preset file {name_or_path} {what}; expected a YAML file or a preset name "
                "(`wmrl presets list`)"
            )
    else:
        path = preset_dir() / f"{name_or_path}{PRESET_SUFFIX}"
    if not path.is_file():
        known = ", ".join(list_presets()) or "none"
        raise ConfigError(
            f"unknown preset '{name_or_path}': expected one of {known} or a .yaml path"
        )
    data = _read_yaml(path)
    data.pop("description", None)
    parent = data.pop("inherits", None)
    if parent is None:
        return data
    if str(parent) in (*_seen, name_or_path):
        raise ConfigError(f"{path}: presets inherit from each other in a circle ({parent})")
    return _merged(load_preset(str(parent), (*_seen, name_or_path)), data)


def _merged(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not a UTF-8 text file (byte {exc.start}); expected a YAML preset in UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}{_where(exc)}: not valid YAML ({_first_line(exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of config sections, got {type(data).__name__}"
        )
    return data


def _first_line(exc: Exception) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        return exc.problem
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _where(exc: yaml.YAMLError) -> str:
    """', line L, column C' of a YAML error that knows its place (1-based), else ''."""
    mark = getattr(exc, "problem_mark", None)
    return f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (['a','b','c'], value); the value is parsed as YAML (typed)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"bad --set '{text}': expected section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_override(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for i, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(path[: i + 1])
            raise ConfigError(f"bad --set {'.'.join(path)}: '{where}' is a value, not a section")
        node = child
    node[path[-1]] = value


def resolve_config(
    preset: str | None = None,
    options: dict[str, Any] | None = None,
    overrides: list[str] | None = None,
    notices: list[str] | None = None,
) -> RunConfig:
    """Preset, then explicit CLI options (dotted keys), then `--set` overrides, validated.

    A preset never chooses where a run writes: its `output_dir` is dropped (a line for it goes
    to `notices`). A saved run's config.yaml names that run's own directory, absolute, so taking
    it as the default would resume the finished run in place, or the original of a copy; the
    run directory comes from `--out` (or `--set output_dir=...`) or the command's default."""
    data: dict[str, Any] = load_preset(preset) if preset else {}
    named = data.pop("output_dir", None)
    if named is not None and notices is not None:
        notices.append(
            f"notice: --preset {preset} names output_dir {named}, which is not used: a preset "
            "never chooses where a run writes (pass --out)"
        )
    for dotted, value in (options or {}).items():
        if value is not None:
            apply_override(data, dotted.split("."), value)
    for text in overrides or []:
        apply_override(data, *parse_override(text))
    return validate_config(data)


def validate_config(data: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"]) or "<root>"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    if err["type"] == "extra_forbidden":
        return f"unknown config key '{loc}'{_did_you_mean(err['loc'])}{more}"
    got = err.get("input")
    got_text = "" if isinstance(got, dict) else f", got {got!r}"
    return f"invalid value for '{loc}': {err['msg'][:1].lower() + err['msg'][1:]}{got_text}{more}"


def _did_you_mean(loc: tuple[int | str, ...]) -> str:
    """' (did you mean 'section.key'?)' naming the closest key of the same section, or ''."""
    model: type[BaseModel] = RunConfig
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        section = field.annotation if field is not None else None
        if not (isinstance(section, type) and issubclass(section, BaseModel)):
            return ""
        model = section
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1, cutoff=0.6)
    return f" (did you mean '{'.'.join([*map(str, loc[:-1]), close[0]])}'?)" if close else ""


def dump_config(config: RunConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
