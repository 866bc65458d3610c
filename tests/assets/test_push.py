"""`wmrl push` against the loopback hub: a tiny trained policy pushed with its model card,
fetched back by its repo id with `wmrl download` and evaluated; the world and reward models'
cards, a private branch, the user's own README.md; bad input in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from typer.testing import CliRunner

from tests.helpers.hub_server import HubServer
from tests.helpers.output import one_error_line
from wmrl_cli.assets.model_card import build_card, public_paths
from wmrl_cli.assets.model_source import find_model
from wmrl_cli.cli.app import app

runner = CliRunner()
SMALL = ["--suite", "mw3", "--image-size", "32", "--num-envs", "3", "--num-workers", "0"]
SMALL += ["--set", "simulator.max_steps=16", "-n", "1"]
POLICY_FILES = {
    "config.json",
    "dataset_statistics.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}


@pytest.fixture(scope="module")
def evaluated(assets, tmp_path_factory) -> tuple[Path, Path]:
    """The tiny sft run of `assets` and a `wmrl eval --policy` of it."""
    out = tmp_path_factory.mktemp("eval") / "eval"
    result = runner.invoke(
        app, ["eval", "--policy", str(assets / "sft"), "--out", str(out), *SMALL]
    )
    assert result.exit_code == 0, result.output
    return assets / "sft", out


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def push(*args: str):
    return runner.invoke(app, ["push", *args, "--no-progress"])


def test_push_download_eval_round_trip(hub: HubServer, evaluated, tmp_path: Path) -> None:
    run, eval_run = evaluated
    before = snapshot(run)
    pushed = push(str(run), "me/tiny-policy", "--eval", str(eval_run))
    assert pushed.exit_code == 0, pushed.output
    done = pushed.output.strip().splitlines()[-1]
    assert done.startswith("done: policy") and "model card generated" in done
    assert "wmrl download me/tiny-policy" in done and hub.url in done
    assert snapshot(run) == before  # nothing local changed, no card written into the run
    assert {p.name for p in (hub.root / "me" / "tiny-policy").iterdir()} == POLICY_FILES | {
        "README.md"
    }

    assets_dir = tmp_path / "assets"
    fetched = runner.invoke(app, ["download", "me/tiny-policy", "--dir", str(assets_dir)])
    assert fetched.exit_code == 0, fetched.output
    local = assets_dir / "me" / "tiny-policy"
    for name in POLICY_FILES:
        assert (local / name).read_bytes() == (run / "policy" / name).read_bytes()
    card = ModelCard.load(local / "README.md")
    assert card.data.library_name == "wmrl" and card.data.license == "apache-2.0"
    assert {"robotics", "reinforcement-learning", "world-model"} <= set(card.data.tags)
    assert "arxiv:2509.15965" in card.data.tags and card.data.pipeline_tag == "robotics"
    report = json.loads((eval_run / "report.json").read_text())
    low, high = report["overall_interval95"]
    overall = f"**{100 * report['overall']:.1f}% [{100 * low:.1f}, {100 * high:.1f}]**"
    assert "`wmrl sft`" in card.text and overall in card.text and "sft.data" in card.text
    assert "suite: mw3" in card.text  # the resolved configuration
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert f"{rows[-1]['env/real_steps']:,.0f} real environment steps" in card.text

    again = runner.invoke(
        app, ["eval", "--policy", str(local), "--out", str(tmp_path / "e"), *SMALL]
    )
    assert again.exit_code == 0, again.output
    second = json.loads((tmp_path / "e" / "report.json").read_text())
    outcomes = [(e["init_id"], e["success"], e["length"]) for e in report["episodes"]]
    assert [(e["init_id"], e["success"], e["length"]) for e in second["episodes"]] == outcomes

    commit = hub.commit_of("me/tiny-policy")
    repeat = push(str(run / "policy"), "me/tiny-policy", "--eval", str(eval_run))
    assert repeat.exit_code == 0 and "no new commit" in repeat.output, repeat.output
    assert hub.commit_of("me/tiny-policy") == commit


def test_world_and_reward_models_and_a_card_of_your_own(
    hub: HubServer, assets, tmp_path: Path
) -> None:
    pushed = push(str(assets / "wm"), "me/tiny-wm", "--private", "--revision", "v1")
    assert pushed.exit_code == 0, pushed.output
    assert hub.private == {"me/tiny-wm"}
    branch = hub.repo("me/tiny-wm", "v1")
    assert branch is not None and set(branch.entries) == {
        "config.json",
        "model.safetensors",
        "README.md",
    }
    assert hub.repo("me/tiny-wm").entries == {}  # main as it was made: empty
    card = ModelCard.load(branch.folder / "README.md")
    assert "video-prediction" in card.data.tags and "OpenSora" in card.text
    assert "world model" in card.text and "/tree/v1" in pushed.output

    mine = tmp_path / "rm"
    shutil.copytree(assets / "rm" / "reward_model", mine)
    (mine / "README.md").write_text("# my reward model\n")
    pushed = push(str(mine), "me/tiny-rm")
    assert pushed.exit_code == 0 and "README.md" in pushed.output, pushed.output
    assert (hub.root / "me" / "tiny-rm" / "README.md").read_text() == "# my reward model\n"
    card = build_card(find_model(assets / "rm"), "me/tiny-rm", "mit")
    assert card.data.license == "mit" and "reward-model" in card.data.tags


def test_a_card_finds_the_runs_own_evaluation(evaluated, tmp_path: Path) -> None:
    run, eval_run = evaluated
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "eval").mkdir()
    shutil.copy(eval_run / "report.json", copy / "eval" / "step_000002.json")
    card = build_card(find_model(copy), "me/x", "apache-2.0")
    assert "the run's `step_000002.json`" in card.text and "Wilson 95%" in card.text
    shutil.rmtree(copy / "policy")  # an unfinished run: its checkpoint's model is named
    ckpt = find_model(copy / "checkpoints" / "step_000002" / "model")
    assert ckpt.kind == "policy" and ckpt.run_dir == copy.absolute()


def test_bad_input_is_one_line(hub: HubServer, evaluated, assets, tmp_path: Path) -> None:
    run, eval_run = evaluated
    one_error_line(push(str(tmp_path / "none"), "me/x"), 1, "does not exist")
    one_error_line(push(str(assets / "demos"), "me/x"), 1, "no policy, world model or reward")
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("policy"))
    one_error_line(push(str(copy), "me/x"), 1, "checkpoints/step_000002/model")
    one_error_line(push(str(run), "not a repo"), 2, "not a Hub repo id")
    one_error_line(push(str(run), "me/x", "--eval", str(run)), 1, "not a policy evaluation")
    one_error_line(push(str(assets / "wm"), "me/x", "--eval", str(eval_run)), 1, "--eval takes")
    hub.writers = {"hf_secret"}
    one_error_line(push(str(run), "me/x"), 1, "HTTP 401", "HF_TOKEN", "write access")
    assert not (hub.root / "me" / "x").exists()
    hub.writers = set()
    assert push(str(run), "me/public").exit_code == 0
    one_error_line(push(str(run), "me/public", "--private"), 1, "exists and is public")
    one_error_line(push(str(run), "me/x", "--repo-type", "space"), 2, "--repo-type")


def test_a_card_names_no_folder_of_the_pushing_machine(evaluated, monkeypatch) -> None:
    """The run records absolute paths (its inputs, its config); the public card shows those
    under the working folder relative to it and the home folder as `~`."""
    run, eval_run = evaluated
    monkeypatch.setenv("HOME", str(run.parent))
    monkeypatch.chdir(eval_run.parent)
    before = build_card(find_model(run), "me/x", "apache-2.0", eval_run)
    assert str(run.parent) not in before.text and str(eval_run.parent) not in before.text
    assert "`sft.data`: `~/demos`" in before.text and "output_dir: ~/sft" in before.text
    assert public_paths(f"{Path.cwd()}/a/b and {Path.cwd()}2/c") == f"a/b and {Path.cwd()}2/c"
