"""Shell completion (`wmrl --install-completion`) of the names the options take: presets,
co-evolve's profiles, published assets and the built-in policies; and help that shows a flag
as a flag."""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand, TyperGroup

BUILT_IN_POLICIES = ("expert", "random")


def complete_presets(incomplete: str) -> list[str]:
    """Shipped preset names starting with `incomplete` (a YAML path is the shell's to complete)."""
    from wmrl_cli.config import list_presets

    return [name for name in list_presets() if name.startswith(incomplete)]


def complete_assets(incomplete: str) -> list[str]:
    """Published asset names (`wmrl download --list`) starting with `incomplete`."""
    from wmrl_cli.assets.registry import ASSETS

    return [name for name in ASSETS if name.startswith(incomplete)]


def complete_policies(incomplete: str) -> list[str]:
    """The built-in policies and the published policies' asset names (a checkpoint directory
    is the shell's to complete)."""
    from wmrl_cli.assets.registry import ASSETS

    names = [*BUILT_IN_POLICIES, *(a.name for a in ASSETS.values() if a.unnorm_key)]
    return [name for name in names if name.startswith(incomplete)]


def _flags_without_metavar(params: list[Any]) -> list[Any]:
    """Typer's help shows every flag as `<bool>`, as if it took a value (`--save-video true` is
    an error): a flag shows no value. (`params`: Typer's own click parameters.)"""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class WmrlCommand(TyperCommand):
    """A command whose help shows its flags as flags."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_without_metavar(super().get_params(ctx))


class WmrlGroup(TyperGroup):
    """The `wmrl` group (and `wmrl presets`): flags shown as flags, as in its commands."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_without_metavar(super().get_params(ctx))
