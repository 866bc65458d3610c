"""Options shared by several commands, config resolution and error reporting."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.text import Text

from wmrl_cli.cli.completion import complete_policies, complete_presets
from wmrl_cli.config import RunConfig, resolve_config
from wmrl_cli.errors import WmrlError
from wmrl_cli.files import environment_error
from wmrl_cli.logging import console, err_console
from wmrl_cli.ranks import LAUNCHED_BY_WMRL, RanksFailed, write_rank_error
from wmrl_cli.run_dirs import close_run_dirs, discard_unused_run_dirs

F = TypeVar("F", bound=Callable[..., Any])

PresetOpt = Annotated[
    str | None,
    typer.Option(
        "--preset",
        "-p",
        help="Preset name (see `wmrl presets list`) or a YAML path.",
        autocompletion=complete_presets,
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        help="Override any config field, e.g. --set simulator.image_size=128 "
        "(repeatable; values are typed YAML).",
    ),
]
OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="Run directory (default: runs/<command>[-<preset>]). The same command again "
        "resumes the run there; another configuration is refused, naming what differs.",
    ),
]
AssetsDirOpt = Annotated[
    Path | None,
    typer.Option(
        help="Where `wmrl download` put the assets named (default: $WMRL_ASSETS or ./assets)."
    ),
]
ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Continue the run in --out with the configuration it recorded, ignoring where "
        "this command's settings differ.",
    ),
]
OverwriteOpt = Annotated[
    bool, typer.Option("--overwrite", help="Start over: delete the run that --out holds.")
]
SuiteOpt = Annotated[
    str | None,
    typer.Option(
        help="Task suite: mw10, mw3, mw2 (Meta-World, embedded) or libero_spatial, "
        "libero_object, libero_goal, libero_10 (the libero extra)."
    ),
]
PolicyOpt = Annotated[
    str | None,
    typer.Option(
        help="Policy: expert (Meta-World's scripted policies), random, a policy checkpoint "
        "directory or a policy asset name (wmrl download --list).",
        autocompletion=complete_policies,
    ),
]
EpisodesOpt = Annotated[
    int | None, typer.Option("--episodes-per-task", "-n", help="Episodes (trials) per task.")
]
SeedOpt = Annotated[
    int | None, typer.Option(help="Base seed; an episode's seed is base seed + its init id.")
]
TrainSeedOpt = Annotated[
    int | None,
    typer.Option(
        help="Seed of the run (simulator.seed): the held-out split, the initial weights, the "
        "batches and the noise."
    ),
]
NumEnvsOpt = Annotated[int | None, typer.Option(help="Environments stepped as one batch.")]
WorkersOpt = Annotated[
    int | None, typer.Option(help="Simulator worker processes (0 runs in this process).")
]
ImageSizeOpt = Annotated[int | None, typer.Option(help="Camera image side in pixels (64 or 256).")]
NoiseOpt = Annotated[
    float | None, typer.Option(help="Std of Gaussian noise added to expert actions.")
]
TemperatureOpt = Annotated[
    float | None, typer.Option(help="Sampling temperature for learned policies (default 1.6).")
]
GreedyOpt = Annotated[
    bool, typer.Option("--greedy", help="Take the most likely action token instead of sampling.")
]


LogWithOpt = Annotated[
    str | None,
    typer.Option(
        "--log-with",
        help="Where metrics go besides metrics.jsonl, comma-separated: tensorboard (the default), "
        "wandb, trackio (logging.tensorboard, logging.trackers).",
    ),
]


def build_config(
    preset: str | None, overrides: list[str] | None, log_with: str | None = None, **options: Any
) -> RunConfig:
    """options: dotted config keys (e.g. 'simulator.seed') -> value or None (not given).
    `log_with`: --log-with's list; a chosen tracker must be installed (checked here, before
    anything is written)."""
    from wmrl_cli.trackers import check_trackers, parse_log_with

    if log_with is not None:
        options["logging__tensorboard"], options["logging__trackers"] = parse_log_with(log_with)
    notices: list[str] = []
    cfg = resolve_config(
        preset, {k.replace("__", "."): v for k, v in options.items()}, overrides, notices
    )
    given = options.get("output_dir") is not None or any(
        text.strip().startswith("output_dir=") for text in overrides or []
    )
    if not given and os.environ.get("RANK", "0") == "0":  # once, on a multi-rank run too
        for line in notices:
            err_console.print(line, style="yellow", soft_wrap=True, markup=False)
    check_trackers(cfg.logging.trackers)
    return cfg


def say_done(what: str, where: Path | str, then: str = "") -> None:
    """Every command's last line, in one shape: what it wrote and where (`then`: what it found
    or what to do next), e.g. `done: policy in runs/sft/policy; evaluate it with ...`."""
    line = Text.assemble(
        ("done", "bold green"), f": {what} in {where}", f"; {then}" if then else ""
    )
    console.print(line, soft_wrap=True)


def handle_errors(func: F) -> F:
    """User errors and the machine's (a full disk, an I/O error) become one red line on stderr
    and a non-zero exit code, no traceback; a run directory the command created and left empty
    but for config.yaml is removed; every run directory it wrote closes its record. Ctrl-C is
    one line, `interrupted`, even where it lands while another error is being reported."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return _reported(func, *args, **kwargs)
        except KeyboardInterrupt:
            # one line for a multi-rank run too: the launching wmrl process's, else rank 0's
            if os.environ.get("RANK", "0") == "0" and LAUNCHED_BY_WMRL not in os.environ:
                err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None
        finally:
            close_run_dirs()

    return wrapper  # type: ignore[return-value]


# What a rank's collective raises when another rank is gone (gloo, NCCL, the TCP store).
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def peer_gone(exc: BaseException) -> bool:
    """In a rank `run_ranks` started: a collective failed because another rank stopped (a
    Ctrl-C reaches every rank, and the first out closes the connections the others wait on;
    or that rank's own error). That rank's status and line say why; this one says nothing."""
    if LAUNCHED_BY_WMRL not in os.environ or not isinstance(exc, RuntimeError):
        return False
    return any(marker in str(exc) for marker in _PEER_GONE)


def _reported(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return func(*args, **kwargs)
    except (WmrlError, OSError, RuntimeError) as exc:
        if peer_gone(exc):  # quiet, and a Ctrl-C still pending is dropped, not a traceback
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            raise typer.Exit(130) from None
        # a full disk or an I/O error anywhere is the machine's: one line too
        failed = exc if isinstance(exc, WmrlError) else environment_error(exc)
        if failed is None:
            raise
        discard_unused_run_dirs()
        if not write_rank_error(str(failed)):  # a rank: the process that started it says it
            lines = failed.lines if isinstance(failed, RanksFailed) else [str(failed)]
            for line in lines:  # several ranks' distinct lines: one each
                err_console.print(Text.assemble(("error: ", "bold red"), line), soft_wrap=True)
        raise typer.Exit(failed.exit_code) from None
