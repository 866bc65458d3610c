"""Finding LIBERO (the `hf-libero` package), its config file and its assets, without prompts.

hf-libero reads `$LIBERO_CONFIG_PATH/config.yaml` (default `~/.libero/config.yaml`) when
`libero.libero` is imported, and asks questions on stdin when the file is missing. wmrl writes
that file itself before the import: in `$LIBERO_CONFIG_PATH` when the user set it (an existing
file is left as it is), else in wmrl's own folder (`~/.cache/wmrl/libero`, kept up to date),
so a user's `~/.libero` from another LIBERO checkout never redirects wmrl's task files.

The bddl task files and init states ship inside the package. The meshes and textures do not:
hf-libero looks in `<package>/libero/libero/assets`, then downloads the Hugging Face dataset
`lerobot/libero-assets` to `~/.cache/libero/assets` on first use. wmrl never downloads them
behind the user's back: it looks in `$WMRL_LIBERO_ASSETS`, the config's `assets` entry and
those two folders, and otherwise says what to run.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import yaml

from wmrl_cli.errors import WmrlError

INSTALL_HINT = "pip install 'wmrl[libero]'"
ASSETS_ENV = "WMRL_LIBERO_ASSETS"
CONFIG_ENV = "LIBERO_CONFIG_PATH"
ASSETS_REPO = "lerobot/libero-assets"
# What a complete assets folder holds (hf-libero checks the first four).
ASSET_SUBDIRS = (
    "articulated_objects",
    "stable_scanned_objects",
    "turbosquid_objects",
    "stable_hope_objects",
    "scenes",
    "textures",
)


class LiberoUnavailable(WmrlError, ImportError):
    """LIBERO cannot run here: the package, its config or its assets are missing. An
    ImportError too, so that `import wmrl_cli.sims.libero_sim` fails like a missing extra."""


def package_dir() -> Path:
    """`<site-packages>/libero/libero`, found without importing it (the import reads the
    config file); a one-line error naming the install command when hf-libero is missing."""
    try:
        spec = importlib.util.find_spec("libero")
    except (ImportError, ValueError):  # a broken or half-removed installation
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / "libero"
        if (candidate / "__init__.py").is_file() and (candidate / "bddl_files").is_dir():
            return candidate
    raise LiberoUnavailable(
        f"the LIBERO simulator needs the hf-libero package, which is not installed: run "
        f"`{INSTALL_HINT}`"
    )


def hf_assets_cache() -> Path:
    """Where hf-libero downloads its assets (it ignores XDG_CACHE_HOME)."""
    return Path(os.path.expanduser("~")) / ".cache" / "libero" / "assets"


def wmrl_config_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "wmrl" / "libero"


def is_assets_dir(path: Path) -> bool:
    return all((path / sub).is_dir() for sub in ASSET_SUBDIRS)


def default_config(pkg: Path, assets: Path | None) -> dict[str, str]:
    """hf-libero's default path dictionary for a package at `pkg` (its
    get_default_path_dict), with `assets` pointing at the folder wmrl found."""
    return {
        "benchmark_root": str(pkg),
        "bddl_files": str(pkg / "bddl_files"),
        "init_states": str(pkg / "init_files"),
        "datasets": str((pkg.parent / "datasets").resolve()),
        "assets": str(assets if assets is not None else pkg / "assets"),
    }


def read_config(config_dir: Path) -> dict[str, str]:
    path = config_dir / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise WmrlError(f"{path}: cannot read the LIBERO config ({exc})") from None
    if not isinstance(data, dict):
        raise WmrlError(f"{path}: the LIBERO config is not a mapping")
    return {str(k): str(v) for k, v in data.items()}


def _write_config(config_dir: Path, config: dict[str, str]) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "config.yaml"
    tmp = path.with_name(f".config.yaml.{os.getpid()}.tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(path)


def find_assets(pkg: Path, config: dict[str, str] | None = None) -> Path:
    """The first complete assets folder: $WMRL_LIBERO_ASSETS, the config's `assets` entry
    (original LIBERO reads it; hf-libero does not), the package's own folder, hf-libero's
    download cache. A one-line error with the command that fetches them otherwise."""
    explicit = os.environ.get(ASSETS_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not is_assets_dir(path):
            raise LiberoUnavailable(
                f"{ASSETS_ENV}={explicit} is not a LIBERO assets folder (it needs "
                f"{', '.join(ASSET_SUBDIRS)})"
            )
        return path
    candidates = [pkg / "assets", hf_assets_cache()]
    if config and config.get("assets"):
        candidates.insert(0, Path(config["assets"]).expanduser())
    for path in candidates:
        if is_assets_dir(path):
            return path
    raise LiberoUnavailable(
        f"the LIBERO assets (meshes and textures) are not installed: run `hf download "
        f"{ASSETS_REPO} --repo-type dataset --local-dir {hf_assets_cache()}`, or set "
        f"{ASSETS_ENV}=DIR to a copy"
    )


def _config_location(config_dir: Path | None) -> tuple[Path, bool]:
    """(folder of config.yaml, whether wmrl manages it)."""
    if config_dir is not None:
        return config_dir, True
    user_dir = os.environ.get(CONFIG_ENV)
    if user_dir:
        return Path(user_dir).expanduser(), False
    return wmrl_config_dir(), True


def check_libero(config_dir: Path | None = None) -> tuple[Path, Path]:
    """(package dir, assets dir), or a one-line `LiberoUnavailable`. Writes nothing."""
    pkg = package_dir()
    where, managed = _config_location(config_dir)
    user_config = None
    if not managed and (where / "config.yaml").is_file():
        user_config = read_config(where)
    return pkg, find_assets(pkg, user_config)


def prepare_libero(config_dir: Path | None = None) -> tuple[Path, Path, Path]:
    """Check the package and its assets, write the config file LIBERO reads at import, and
    point $LIBERO_CONFIG_PATH at it (worker processes inherit it). Never imports LIBERO.

    Returns (package dir, config dir, assets dir)."""
    pkg, assets = check_libero(config_dir)
    where, managed = _config_location(config_dir)
    path = where / "config.yaml"
    existing = read_config(where) if path.is_file() else None
    if existing is None or (managed and existing != default_config(pkg, assets)):
        _write_config(where, default_config(pkg, assets))
    else:
        for key in ("bddl_files", "init_states"):
            value = existing.get(key)
            if not value or not Path(value).is_dir():
                raise LiberoUnavailable(
                    f"{path}: '{key}' is not a folder ({value or 'missing'}); fix it or "
                    f"unset {CONFIG_ENV}"
                )
    os.environ[CONFIG_ENV] = str(where)
    return pkg, where, assets
