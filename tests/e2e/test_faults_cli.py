"""The newcomer audit's reproductions of what each command says: its advice, its progress and
closing lines, its options and its refusals (issue 63's items on messages); each holds as a
test so that it stays fixed. Faults that lose data are in test_faults.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.episodes import visible_success_episode
from tests.helpers.output import one_error_line
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.logging import progress_task

runner = CliRunner()


def successes_store(root: Path, per_task: int) -> Path:
    """`per_task` successful episodes of each of two tasks."""
    EpisodeStore(root).add([visible_success_episode(i, succeed=True) for i in range(2 * per_task)])
    return root


def test_train_reward_says_the_split_needs_two_successes_per_task(tmp_path) -> None:
    """`wmrl rollout --policy expert -n 1; wmrl train-reward`: every episode succeeded, but
    the split holds out a task's successes only from 2 on; the advice says so (it said to
    collect rollouts that succeed)."""
    data = successes_store(tmp_path / "eps", per_task=1)
    args = ["train-reward", "--data", str(data), "--out", str(tmp_path / "R"), "--steps", "2"]
    line = one_error_line(runner.invoke(app, args), 1, "at least 2 successful episodes per task")
    assert "collect rollouts that succeed" not in line
    assert not (tmp_path / "R").exists()


def train_reward(data: Path, out: Path | str, *extra: str):
    args = ["train-reward", "--data", str(data), "--out", str(out), "--steps", "2"]
    return runner.invoke(app, [*args, "--width", "4", *extra])


def test_a_missing_preset_file_is_named_as_a_file(tmp_path) -> None:
    """`--preset gone.yaml` was 'unknown preset', listing the shipped presets."""
    for preset, what in ((tmp_path / "gone.yaml", "does not exist"), (tmp_path, "is a directory")):
        args = ["sft", "--preset", str(preset), "--out", str(tmp_path / "R")]
        line = one_error_line(runner.invoke(app, args), 2, f"preset file {preset} {what}")
        assert "unknown preset" not in line


def test_a_yaml_error_names_its_line(tmp_path) -> None:
    preset = tmp_path / "bad.yaml"
    preset.write_text("training:\n  lr: 1.0e-4\n  steps: [1,\n")
    args = ["sft", "--preset", str(preset), "--out", str(tmp_path / "R")]
    one_error_line(runner.invoke(app, args), 2, f"{preset}, line 4, column 1: not valid YAML")


def test_an_unknown_key_suggests_the_closest_one(tmp_path) -> None:
    for given, said in (
        ("sft.llm_hiden", "'sft.llm_hiden' (did you mean 'sft.llm_hidden'?)"),
        ("trainin.lr", "'trainin' (did you mean 'training'?)"),
    ):
        args = ["sft", "--set", f"{given}=3", "--out", str(tmp_path / "R")]
        one_error_line(runner.invoke(app, args), 2, said)
    args = ["sft", "--set", "sft.zzzz=3", "--out", str(tmp_path / "R")]
    assert "did you mean" not in one_error_line(runner.invoke(app, args), 2, "'sft.zzzz'")


def test_out_dot_in_an_empty_folder_is_a_run(tmp_path, monkeypatch) -> None:
    """`--out .` was refused as the current directory, even in a new, empty folder; a folder
    holding files is still refused."""
    data = successes_store(tmp_path / "eps", per_task=2)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    result = train_reward(data, ".")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "here" / "reward_model").is_dir()
    monkeypatch.chdir(tmp_path)
    one_error_line(train_reward(data, "."), 2, "--out . is the current directory")


def test_the_changed_data_refusal_says_what_resumes_the_run(tmp_path) -> None:
    """The refusal said 'run the same command to resume it', which is refused again when the
    data changed: it says to restore the files, or pass --resume."""
    data = successes_store(tmp_path / "eps", per_task=2)
    assert train_reward(data, tmp_path / "R").exit_code == 0
    EpisodeStore.open(data).add([visible_success_episode(9, succeed=True)])
    line = one_error_line(train_reward(data, tmp_path / "R"), 2, "restore the files it was made")
    assert "same command" not in line and "--resume" in line
    line = one_error_line(train_reward(data, tmp_path / "R", "--width", "8"), 2)
    assert f"settings it recorded ({tmp_path / 'R' / 'config.yaml'})" in line


def test_rollout_overwrite_replaces_the_store_keeping_the_users_files(tmp_path) -> None:
    """`rollout` had no --overwrite: a store could only be appended to or moved away."""
    args = ["rollout", "--policy", "random", "--suite", "mw2", "--num-envs", "2"]
    args += ["--num-workers", "0", "--image-size", "32", "--set", "simulator.max_steps=8"]
    out = tmp_path / "store"
    assert runner.invoke(app, [*args, "-n", "2", "--out", str(out)]).exit_code == 0
    (out / "notes.txt").write_text("mine")
    one_error_line(runner.invoke(app, [*args, "-n", "1", "--out", str(out)]), 2, "--overwrite")
    both = [*args, "-n", "1", "--out", str(out), "--overwrite", "--append"]
    one_error_line(runner.invoke(app, both), 2, "exclude each other")
    result = runner.invoke(app, [*args, "-n", "1", "--out", str(out), "--overwrite"])
    assert result.exit_code == 0, result.output
    store = EpisodeStore.open(out)
    assert len(store) == 2 and sorted(m["init_id"] for m in store.index) == [0, 1]
    assert len(list((out / "episodes").iterdir())) == 2
    assert (out / "notes.txt").read_text() == "mine"


def test_eval_takes_the_assets_dir_of_the_asset_it_names(tmp_path) -> None:
    assets = tmp_path / "assets"
    args = ["eval", "--policy", "openvla-oft-libero-spatial-traj1", "--assets-dir", str(assets)]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "E")])
    one_error_line(result, 1, f"not downloaded in {assets}", f"--dir {assets}")


def completions(words: str) -> list[str]:
    """What `wmrl`'s bash completion offers for the last of `words`."""
    env = {"_WMRL_COMPLETE": "complete_bash", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - 1)
    result = runner.invoke(app, [], prog_name="wmrl", env=env)
    return result.output.split()


def test_shell_completion_offers_presets_profiles_and_asset_names() -> None:
    assert completions("wmrl sft --preset mw-coevolve-s") == ["mw-coevolve-smoke"]
    assert completions("wmrl presets show mw-sim-p") == ["mw-sim-ppo"]
    assert completions("wmrl co-evolve --profile l") == ["long"]
    assert completions("wmrl eval --policy exp") == ["expert"]
    assert "openvla-oft-libero-spatial-traj1" in completions("wmrl eval --policy openvla")
    assert "wan-libero-spatial" in completions("wmrl download wan")
    assert completions("wmrl train-reward --data D --init wan-libero-s") == ["wan-libero-spatial"]


def test_version_short_flag_and_flags_shown_as_flags() -> None:
    """`-V` beside `--version`; help showed `--save-video <bool>` (and every other flag so),
    but `--save-video true` is an error: a flag shows no value, and --no-save-video exists."""
    assert runner.invoke(app, ["-V"]).output == runner.invoke(app, ["--version"]).output
    assert runner.invoke(app, ["-V"]).output.startswith("wmrl ")
    text = runner.invoke(app, ["eval", "--help"], env={"COLUMNS": "200"}).output
    assert "<bool>" not in text and "--no-save-video" in text
    assert "<bool>" not in runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).output


def test_the_default_co_evolve_says_what_it_will_take(tmp_path, monkeypatch) -> None:
    """The default profile ran about 3 hours on 2 cores without saying so when it started."""
    import wmrl_cli.coevolve.pipeline as pipeline

    monkeypatch.setattr(pipeline, "prepare_co_evolve", lambda cfg, ranks: None)
    monkeypatch.setattr(pipeline, "co_evolve", lambda cfg, run, ranks: {"success": {}})
    result = runner.invoke(app, ["co-evolve", "--out", str(tmp_path / "C")])
    assert result.exit_code == 0, result.output
    assert "co-evolve --profile default: about 3 hours on a 2-core CPU" in result.output


def last_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def test_train_policy_warns_when_it_made_no_update(assets, tmp_path) -> None:
    """Standalone train-policy said nothing after its steps at train/loss 0 (every group of the
    untrained judge's verdicts alike: no gradient), where co-evolve's report warns; and it ends
    on the closing line every command ends on."""
    from tests.helpers.train_policy import args

    result = runner.invoke(app, args(assets, tmp_path / "rl", 2, algo="grpo"))
    assert result.exit_code == 0, result.output
    assert "warning: train-policy made no update: in its 2 steps" in result.output
    assert last_line(result).startswith(f"done: policy in {tmp_path / 'rl'}")


def test_train_wm_lines_count_each_stage_to_its_total(expert_episodes, tmp_path) -> None:
    """train-wm printed bare `step 5` lines, without the total or the model they were about."""
    data = tmp_path / "eps"
    EpisodeStore(data).add(expert_episodes)
    args = ["train-wm", "--data", str(data), "--backend", "opensora", "--vae-steps", "2"]
    args += ["--steps", "2", "--out", str(tmp_path / "wm"), "--set", "simulator.image_size=32"]
    for key in ("batch_size=2", "val_every=2", "val_episodes=1", "val_horizon=8"):
        args += ["--set", f"world_model.{key}"]
    result = runner.invoke(app, [*args, "--set", "world_model.num_inference_steps=1"])
    assert result.exit_code == 0, result.output
    assert "autoencoder step 2/2  train/wm/autoencoder_loss" in result.output
    assert "world model step 2/2  train/wm/loss" in result.output
    assert last_line(result) == f"done: world model in {tmp_path / 'wm' / 'world_model'}"


def test_every_command_ends_on_what_it_wrote_and_where(tmp_path, monkeypatch) -> None:
    """Each command ended on a different kind of line (a table, `report: ...`, `policy saved
    to ...`); now on one: `done: WHAT in WHERE`. The eval title named the policy by its folder
    (`policy on mw2`): it names it as given."""
    store = tmp_path / "store"
    args = ["rollout", "--policy", "random", "--suite", "mw2", "--num-envs", "2", "-n", "1"]
    args += ["--num-workers", "0", "--image-size", "32", "--set", "simulator.max_steps=8"]
    rollout = runner.invoke(app, [*args, "--out", str(store)])
    assert last_line(rollout) == f"done: 2 episodes in {store}"
    ev = runner.invoke(app, ["eval", *args[1:], "--out", str(tmp_path / "E")])
    assert last_line(ev) == f"done: report (report.md, report.json) in {tmp_path / 'E'}"
    data = successes_store(tmp_path / "eps", per_task=2)
    reward = train_reward(data, tmp_path / "R")
    assert last_line(reward) == f"done: reward model in {tmp_path / 'R' / 'reward_model'}"
    import wmrl_cli.coevolve.pipeline as pipeline

    monkeypatch.setattr(pipeline, "prepare_co_evolve", lambda cfg, ranks: None)
    report = {"success": {"base": {"overall": 0.5}}}
    monkeypatch.setattr(pipeline, "co_evolve", lambda cfg, run, ranks: report)
    co = runner.invoke(app, ["co-evolve", "--profile", "smoke", "--out", str(tmp_path / "C")])
    assert last_line(co) == (
        f"done: report (report.md, report.json) in {tmp_path / 'C'}; real success: base 50.0%"
    )


def test_the_eval_title_names_the_policy_as_given(assets, tmp_path) -> None:
    """`eval --policy RUN/policy` was titled `policy on mw3`: the folder's name, read as the
    policy's."""
    policy = assets / "sft" / "policy"
    args = ["eval", "--policy", str(policy), "--suite", "mw3", "-n", "1", "--num-envs", "3"]
    args += ["--num-workers", "0", "--image-size", "32", "--set", "simulator.max_steps=8"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "E")])
    assert result.exit_code == 0, result.output
    assert f"success_once: {policy} on mw3" in result.output


def test_progress_lines_say_the_time_left(capsys) -> None:
    """Plain progress lines (no terminal) gave done/total and the time spent, not what is left."""
    from wmrl_cli.logging import track_batches

    assert list(track_batches(range(0, 5, 2), "open-loop rollouts (episodes)", True)) == [0, 2, 4]
    with progress_task("loop", 4, every_s=0.0) as advance:
        advance()
        advance(3)
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == [
        "open-loop rollouts (episodes): 0/5",
        "open-loop rollouts (episodes): 5/5, 0 s",
    ]
    assert lines[2] == "loop: 1/4, 0 s, about 0 s left" and lines[3] == "loop: 4/4, 0 s"


def test_a_resumed_loop_paces_only_its_own_steps(monkeypatch, capsys) -> None:
    """A world model resumed at step 1200 of 2400 said "about 3 min left" after 130 steps in
    193 s: the pace counted the steps of the run before as done in this one (2026-11-29)."""
    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr("wmrl_cli.logging.time.monotonic", lambda: next(clock))
    with progress_task("world model", 300, every_s=0.0, completed=200) as advance:
        advance()  # one step in 10 s: 99 left, about 990 s
        advance(99)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["world model: 201/300, 10 s, about 16 min left", "world model: 300/300, 20 s"]


def test_a_rank_whose_peer_is_gone_says_nothing(monkeypatch, capsys) -> None:
    """Ctrl-C during a 2-rank checkpoint save printed rank 1's ~210-line traceback (gloo's
    "Connection closed by peer": rank 0 had stopped first); the process that started the ranks
    says `interrupted` once. A rank's other RuntimeErrors (bugs) keep their traceback."""
    import typer

    from wmrl_cli.cli.common import handle_errors
    from wmrl_cli.ranks import LAUNCHED_BY_WMRL

    @handle_errors
    def collective() -> None:
        raise RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection closed by peer [::1]:4")

    monkeypatch.setenv(LAUNCHED_BY_WMRL, "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr("signal.signal", lambda *a: None)  # the test's own SIGINT stays
    with pytest.raises(typer.Exit) as ended:
        collective()
    assert ended.value.exit_code == 130 and capsys.readouterr() == ("", "")
    monkeypatch.delenv(LAUNCHED_BY_WMRL)
    with pytest.raises(RuntimeError, match="closed by peer"):  # not a rank: a bug's traceback
        collective()


def test_ctrl_c_while_an_error_is_reported_is_one_line(monkeypatch, capsys) -> None:
    """A Ctrl-C that lands while another error is being reported (a collective failing as the
    signal arrives) was a chained traceback: it is `interrupted`, exit 130."""
    import typer

    import wmrl_cli.cli.common as common

    def interrupted(exc: BaseException) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(common, "environment_error", interrupted)

    @common.handle_errors
    def failing() -> None:
        raise OSError("the disk")

    with pytest.raises(typer.Exit) as ended:
        failing()
    assert ended.value.exit_code == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_the_resume_notice_is_said_by_rank_0_alone(tmp_path, monkeypatch, capsys) -> None:
    """`resuming ... from step_X` was printed by every rank."""
    from wmrl_cli.training.checkpoints import latest_checkpoint

    step = tmp_path / "checkpoints" / "step_000002"
    step.mkdir(parents=True)
    (step / "state.json").write_text("{}")
    (tmp_path / "checkpoints" / "latest").write_text("step_000003")
    monkeypatch.setattr("wmrl_cli.training.checkpoints._complete", lambda path: path.is_dir())
    monkeypatch.setenv("RANK", "1")
    assert latest_checkpoint(tmp_path) == step and capsys.readouterr().out == ""
    monkeypatch.setenv("RANK", "0")
    assert latest_checkpoint(tmp_path) == step
    assert "resuming from step_000002" in capsys.readouterr().out


def test_ctrl_c_on_two_ranks_prints_no_rank_traceback(capfd) -> None:
    """The reproduction on real ranks: rank 0 stops on the Ctrl-C, rank 1's gloo collective
    fails on the closed connection; nothing but the launcher's status comes out."""
    from wmrl_cli.ranks import run_ranks

    ended = run_ranks(2, "tests.helpers.rank_interrupt", [])
    out, err = capfd.readouterr()
    assert ended.code == 130 and ended.errors == []
    assert "Traceback" not in out + err and "closed by peer" not in out + err
