"""Typed run configuration, presets and overrides."""

from wmrl_cli.config.loading import dump_config, list_presets, load_preset, resolve_config
from wmrl_cli.config.schema import RunConfig

__all__ = ["RunConfig", "dump_config", "list_presets", "load_preset", "resolve_config"]
