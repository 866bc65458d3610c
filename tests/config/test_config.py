"""Configuration errors: one line naming the key path, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from wmrl_cli.cli.app import app
from wmrl_cli.config import resolve_config
from wmrl_cli.errors import ConfigError

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--preset", "no-such-preset"], "unknown preset 'no-such-preset'"),
        (["--set", "simulator.no_such_key=1"], "unknown config key 'simulator.no_such_key'"),
        (["--set", "nosection=1"], "unknown config key 'nosection'"),
        (["--set", "simulator.image_size=big"], "'simulator.image_size'"),
        (["--set", "simulator.image_size=8"], "greater than or equal to 16"),
        (["--set", "policy.temperature=-1"], "'policy.temperature'"),
        (["--set", "simulator.camera.x=1"], "'simulator.camera'"),
        (["--set", "simulator.suite=mw3", "--set", "simulator.suite.x=1"], "is a value"),
        (["--set", "no_equals_sign"], "expected section.key=value"),
        (["--set", "simulator.terminate_on_success=maybe"], "terminate_on_success"),
        (["--episodes-per-task", "0"], "'eval.episodes_per_task'"),
    ],
)
def test_config_errors_exit_2_with_one_line(args: list[str], needle: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "--out", str(tmp_path / "run"), *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert needle in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()  # nothing written for a bad config


def test_invalid_yaml_preset_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("simulator: [unclosed\n")
    result = runner.invoke(app, ["eval", "--preset", str(bad)])
    assert result.exit_code == 2 and "not valid YAML" in result.output


def test_overrides_are_typed_and_ordered() -> None:
    cfg = resolve_config(
        "mw-rollout-kir",
        {"policy.noise_std": 0.1},
        ["policy.noise_std=0.2", "rollout.kir.chunks_before_success=[1, 3]", "policy.top_k=5"],
    )
    assert cfg.policy.noise_std == 0.2  # --set wins over options, options over the preset
    assert cfg.rollout.kir.chunks_before_success == [1, 3]
    assert cfg.policy.top_k == 5 and cfg.rollout.episodes_per_task == 20


def test_every_shipped_preset_validates() -> None:
    from wmrl_cli.config import list_presets

    names = list(list_presets())
    assert "mw-eval" in names
    for name in names:
        resolve_config(name)


def test_presets_cli_list_and_show() -> None:
    listed = runner.invoke(app, ["presets", "list"])
    assert listed.exit_code == 0 and "mw-eval" in listed.output
    shown = runner.invoke(app, ["presets", "show", "mw-eval"])
    assert shown.exit_code == 0
    assert yaml.safe_load(shown.output)["simulator"]["suite"] == "mw10"
    missing = runner.invoke(app, ["presets", "show", "nope"])
    assert missing.exit_code == 2


def test_version() -> None:
    from wmrl_cli import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_config_error_type() -> None:
    with pytest.raises(ConfigError):
        resolve_config(overrides=["simulator.suite=1.5", "simulator.max_steps=-3"])


def test_a_preset_inherits_another_key_by_key(tmp_path: Path) -> None:
    coevolve = resolve_config("wan-spatial-coevolve")
    grpo = resolve_config("wan-spatial-grpo")
    assert coevolve.coevolve.start == "given" and coevolve.coevolve.evolved_rollouts_per_task == 100
    assert coevolve.world_model.lr == 1e-4 and coevolve.world_model.path == grpo.world_model.path
    assert coevolve.algorithm == grpo.algorithm and coevolve.training == grpo.training
    child = tmp_path / "child.yaml"
    child.write_text(f"inherits: {child}\nsimulator:\n  suite: mw3\n")
    with pytest.raises(ConfigError, match="inherit from each other in a circle"):
        resolve_config(str(child))


def test_co_evolve_from_sft_refuses_libero_before_writing(tmp_path: Path) -> None:
    out = tmp_path / "ce"
    args = ["co-evolve", "--profile", "smoke", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--set", "simulator.suite=libero_spatial"])
    assert result.exit_code == 2 and "coevolve.start" in result.output
    assert "--preset wan-spatial-coevolve" in result.output and not out.exists()


@pytest.mark.parametrize(
    ("child", "parent"),
    [
        ("wan-object-grpo", "wan-spatial-grpo"),
        ("wan-goal-grpo", "wan-spatial-grpo"),
        ("opensora-object-grpo", "opensora-spatial-grpo"),
        ("mw-wan-grpo", "mw-opensora-grpo"),
        ("mw-wan-ppo", "mw-wan-grpo"),
        ("opensora-spatial-grpo", "wan-spatial-grpo"),
        ("wan-spatial-coevolve", "wan-spatial-grpo"),
        ("opensora-spatial-coevolve", "wan-spatial-coevolve"),
        ("mw-sim-ppo", "mw-sim-grpo"),
        ("mw-opensora-grpo", "mw-sim-grpo"),
        ("mw-coevolve", "mw-sim-grpo"),
        ("mw-coevolve-smoke", "mw-coevolve"),
        ("mw-coevolve-long", "mw-coevolve"),
    ],
)
def test_a_family_member_differs_from_its_parent_only_where_it_says(child, parent) -> None:
    """Presets composed, not copied: a member resolves to its parent's configuration but for
    the keys its own file writes."""
    from wmrl_cli.config import dump_config
    from wmrl_cli.config.loading import preset_dir

    def flat(value, prefix=""):
        if isinstance(value, dict):
            return {
                k: v
                for key, item in value.items()
                for k, v in flat(item, f"{prefix}{key}.").items()
            }
        return {prefix[:-1]: value}

    own = yaml.safe_load((preset_dir() / f"{child}.yaml").read_text())
    assert own.pop("inherits") == parent
    own.pop("description")
    written = set(flat(own))
    a = flat(yaml.safe_load(dump_config(resolve_config(child))))
    b = flat(yaml.safe_load(dump_config(resolve_config(parent))))
    assert {k for k in a if a[k] != b.get(k)} <= written


def _settings(value, prefix: str = "") -> dict:
    """A preset file's own settings as {dotted key: value}."""
    if isinstance(value, dict):
        pairs = [_settings(item, f"{prefix}{key}.").items() for key, item in value.items()]
        return {k: v for items in pairs for k, v in items}
    return {prefix[:-1]: repr(value)}


def test_no_preset_repeats_more_than_ten_settings_of_another() -> None:
    """Presets composed, not copied (issue 66): what two presets share lives in the one the
    other inherits, so no file writes more than 10 of the settings another writes too."""
    from wmrl_cli.config.loading import preset_dir

    own = {}
    for path in sorted(preset_dir().glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        data.pop("description", None)
        data.pop("inherits", None)
        own[path.stem] = set(_settings(data).items())
    names = sorted(own)
    repeated = {
        (a, b): len(own[a] & own[b])
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if len(own[a] & own[b]) > 10
    }
    assert not repeated, f"settings two presets both write (compose with inherits:): {repeated}"
