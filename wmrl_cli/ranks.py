"""Ranks, in one place: starting them, what they say, and how they end.

Starting: `run_ranks` runs a module on N processes through torchrun, and this module is the
torchrun it starts; `relaunch_ranks` runs the command itself on N ranks (`train-policy` and
`train-wm --num-processes N`); `on_ranks` runs one job of a co-evolve stage on N ranks
(`wmrl co-evolve --num-processes N`, each rank `python -m wmrl_cli.cli.stage_ranks`).

`python -m wmrl_cli.ranks TORCHRUN-ARGS`: torchrun without its own output; torchrun's log
lines and its ChildFailedError traceback would repeat the ranks' error in 30 lines. Exits with
the status of the rank that failed first (128 + N for a rank killed by signal N), or 128 + N
when torchrun itself got signal N (Ctrl-C: 130).

A rank that stops on a user's error (the CLI's one line) writes that line for the process that
started it (`write_rank_error`) rather than printing it, and `run_ranks` returns the distinct
lines: eight ranks that fail alike say it once; ranks that fail differently are named. A bug's
traceback is printed by its rank, as it happens.

In a rank: `check_not_single_rank_launch` refuses an `accelerate launch` that started one
process where it was asked for several; `end_ranks` closes the process group in order once the
command finished (`run_then_end_ranks`: `wmrl`'s entry point)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.files import atomic_write_text

# A parameter whose gradient has a size-1 dimension of another stride (a vision tower's
# register tokens at batch 1, a slice of the grad of a concatenation) makes DDP warn once
# per rank; that dimension's stride does not matter, the copy into the bucket is the same.
_RANK_WARNINGS = "ignore:Grad strides do not match bucket view strides:UserWarning"


# Set in the ranks `run_ranks` starts: the process that started them says "interrupted" once.
LAUNCHED_BY_WMRL = "WMRL_RANKS_LAUNCHER"
# ... and the folder where each rank writes its error line (rank_R.txt) for it to say once.
RANK_ERRORS = "WMRL_RANK_ERRORS"


@dataclass(frozen=True)
class RanksOutcome:
    """How N ranks ended: `code` is the status of the rank that failed first (0: every rank
    succeeded); `errors` the distinct error lines the ranks wrote (`rank_errors`)."""

    code: int
    errors: list[str] = field(default_factory=list)


class RanksFailed(WmrlError):
    """Ranks that stopped with a non-zero status: `lines`, what they said (their distinct
    error lines; the CLI prints each as an error line); the exit code theirs."""

    def __init__(self, lines: list[str], exit_code: int) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines
        self.exit_code = exit_code


def rank_environment(errors: Path | None = None) -> dict[str, str]:
    """The ranks' environment: OMP_NUM_THREADS 1 where unset, as torchrun would set it but
    without its banner (`num_threads` sets each rank's torch threads), DDP's warning about
    gradient strides filtered, and where they write their error lines (`errors`)."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONWARNINGS"] = ",".join(filter(None, (env.get("PYTHONWARNINGS"), _RANK_WARNINGS)))
    env[LAUNCHED_BY_WMRL] = str(os.getpid())
    if errors is not None:
        env[RANK_ERRORS] = str(errors)
    return env


def write_rank_error(message: str) -> bool:
    """In a rank `run_ranks` started: `message` (a user's error) written on one line for that
    process to say, and True; False elsewhere, or where it cannot be written (the caller
    prints it)."""
    folder = os.environ.get(RANK_ERRORS)
    if not folder or "RANK" not in os.environ:
        return False
    line = " ".join(part.strip() for part in message.splitlines())
    try:  # into the launcher's folder only: once it is gone, nobody would read it
        (Path(folder) / f"rank_{os.environ['RANK']}.txt").write_text(line)
    except OSError:
        return False
    return True


def rank_errors(folder: Path, num_processes: int) -> list[str]:
    """The distinct lines the ranks wrote into `folder`: one line as it is (however many ranks
    said it: torchrun stops the others once one fails, some before they write), several each
    prefixed with the ranks that said it."""
    said: dict[str, list[int]] = {}
    for rank in range(num_processes):
        path = folder / f"rank_{rank}.txt"
        if path.is_file():
            said.setdefault(path.read_text().strip(), []).append(rank)
    if len(said) <= 1:
        return list(said)
    return [
        f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))}: {line}"
        for line, ranks in said.items()
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_local_gpus(num_processes: int) -> None:
    """Training ranks started on this machine each need a GPU of their own where there are
    GPUs (each trains on the GPU of its local rank): more ranks than GPUs would stop each extra
    rank on an invalid device, after the others had loaded. A ConfigError (exit 2) naming the
    way across machines. Called by the commands that start training ranks, before they start
    (`run_ranks` itself also starts ranks that use no GPU)."""
    import torch

    if num_processes <= 1 or not torch.cuda.is_available():
        return
    gpus = torch.cuda.device_count()
    if num_processes > gpus:
        raise ConfigError(
            f"--num-processes {num_processes}: each rank trains on a GPU of its own, and this "
            f"machine has {gpus}; across machines, start `accelerate launch` on each "
            '(docs/libero.md, "Several GPUs and nodes")'
        )


def run_ranks(num_processes: int, module: str, argv: list[str]) -> RanksOutcome:
    """`python -m module argv` on `num_processes` ranks of this machine (gloo on CPU, NCCL on
    GPUs); waits for them and returns how they ended (nothing printed here). Ctrl-C stops
    them, then raises KeyboardInterrupt here; SIGTERM and SIGHUP sent to this process are
    passed on to them (torchrun stops its ranks), so that none runs on without it."""
    cmd = [
        sys.executable,
        "-m",
        __name__,  # torchrun, quiet
        f"--nproc_per_node={num_processes}",
        f"--master_port={free_port()}",
        "-m",
        module,
        *argv,
    ]
    torchrun: subprocess.Popen | None = None

    def forward(sig: int, _: object) -> None:
        if torchrun is not None:
            torchrun.send_signal(sig)

    # Set before torchrun starts, so that no signal falls between; in the main thread alone
    # (elsewhere nothing is forwarded), and not over an ignored signal (nohup's SIGHUP).
    before: dict[int, Any] = {}
    try:
        errors: Path | None = Path(tempfile.mkdtemp(prefix="wmrl-rank-errors-"))
    except OSError:  # no temporary folder: the ranks print their own lines
        errors = None
    try:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    before[sig] = signal.signal(sig, forward)
        torchrun = subprocess.Popen(cmd, env=rank_environment(errors))
        try:
            code = torchrun.wait()
            said = rank_errors(errors, num_processes) if code and errors is not None else []
            if said and code >= 128:  # the first rank to stop was killed: that is the cause
                said.append(f"a rank was stopped by signal {code - 128} (exit status {code})")
            return RanksOutcome(code, said)
        except KeyboardInterrupt:
            # A Ctrl-C at a terminal reached torchrun and the ranks too; a SIGINT sent to
            # this process alone (kill -INT, a scheduler) is passed on, so that no rank runs on.
            try:
                torchrun.wait(timeout=5)
            except subprocess.TimeoutExpired:
                torchrun.send_signal(signal.SIGINT)
                torchrun.wait()
            raise
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        if errors is not None:
            shutil.rmtree(errors, ignore_errors=True)


def relaunch_ranks(num_processes: int) -> None:
    """Start N ranks with torchrun (gloo on CPU, NCCL on GPUs), this command without the flag;
    exits with their status."""
    import typer

    argv, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if arg == "--num-processes":
            skip = True
            continue
        if arg.startswith("--num-processes="):
            continue
        argv.append(arg)
    check_local_gpus(num_processes)
    ended = run_ranks(num_processes, "wmrl_cli", argv)
    if ended.code == 130:  # a Ctrl-C that reached the ranks alone: "interrupted", once, here
        raise KeyboardInterrupt
    if ended.errors:  # said once here (handle_errors), whatever the number of ranks
        raise RanksFailed(ended.errors, ended.code)
    raise typer.Exit(ended.code)


# -- a co-evolve stage's job on ranks --------------------------------------------------------------
# The pipeline stays one process: it evaluates, collects, merges and records the stages, and it
# never joins a process group. A stage that trains on ranks (RL, a world model; coevolve/stages.py
# `RANK_JOBS`) is started as N processes of `python -m wmrl_cli.cli.stage_ranks JOB FOLDER SEED
# [ARGS]`. Each rank reads the stage's config from FOLDER/config.yaml, which the pipeline wrote,
# and runs the stage's own job, the function the one-process stage calls, as `wmrl train-policy
# --num-processes N` (or `train-wm`) would with that config; the main rank writes the job's
# result to FOLDER/ranks_result.json, where the pipeline reads it. The pipeline stops with the
# ranks' exit status and says their error once, naming the stage.

RESULT_FILE = "ranks_result.json"
WORKER = "wmrl_cli.cli.stage_ranks"


def on_ranks(job: str, folder: Path, ranks: int, args: list[str] | None = None) -> str:
    """Job `job` of the stage in `folder` run on `ranks` processes, with `args` after the
    stage's config; its result (the main rank's). The ranks seed their global RNGs as this
    process's stage was seeded (`StageCache.run`: torch's initial seed), so that they start from
    what the stage would draw here. Ctrl-C stops the ranks and then this process
    (KeyboardInterrupt); SIGTERM stops them too (the stage fails with their status)."""
    import torch

    result = folder / RESULT_FILE
    result.unlink(missing_ok=True)  # a result of an earlier attempt is not this one's
    argv = [job, str(folder), str(torch.initial_seed()), *(args or [])]
    ended = run_ranks(ranks, WORKER, argv)  # Ctrl-C: KeyboardInterrupt, once they stopped
    if ended.code == 130:  # a Ctrl-C that reached the ranks alone
        raise KeyboardInterrupt
    if ended.errors:  # what the ranks said, once, naming the stage
        said = [f"{folder.name} on {ranks} ranks: {line}" for line in ended.errors]
        raise RanksFailed(said, ended.code)
    if ended.code != 0:  # a bug's traceback or a signal: the rank printed what it could
        raise RanksFailed(
            [f"{folder.name}: its {ranks} ranks stopped (exit status {ended.code})"], ended.code
        )
    if not result.is_file():
        raise WmrlError(f"{folder.name}: its {ranks} ranks finished without writing {result}")
    return json.loads(result.read_text())["result"]


def write_result(folder: Path, result: str) -> None:
    """The main rank's result of the stage's job, for `on_ranks`."""
    atomic_write_text(folder / RESULT_FILE, json.dumps({"result": result}))


# -- in a rank -------------------------------------------------------------------------------------


def _requested_processes(launcher_argv: list[str]) -> int:
    """The `--num_processes N` of an `accelerate launch` command line (1 when not given); the
    arguments after the script or module (`-m`) are the script's own."""
    for i, arg in enumerate(launcher_argv):
        if arg in ("-m", "--module") or "wmrl" in arg:
            break
        name, _, value = arg.partition("=")
        if name in ("--num_processes", "--num-processes"):
            if not value and i + 1 < len(launcher_argv):
                value = launcher_argv[i + 1]
            try:
                return int(value)
            except ValueError:
                return 1
    return 1


def check_not_single_rank_launch() -> None:
    """Refuses, in one line, a command that `accelerate launch --num_processes N` (N > 1)
    started as its only process: accelerate's simple launcher, used for `--cpu` and without
    `--multi_gpu`, starts one process whatever N says, and the run would quietly train on one
    rank. (The launcher marks its child with ACCELERATE_USE_CPU; ranks have WORLD_SIZE.)"""
    if "ACCELERATE_USE_CPU" not in os.environ or "WORLD_SIZE" in os.environ:
        return
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return
    argv = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    if "launch" not in argv:
        return
    requested = _requested_processes(argv[argv.index("launch") + 1 :])
    if requested > 1:
        raise ConfigError(
            f"accelerate launch --num_processes {requested} started a single process "
            "(its simple launcher, used with --cpu or without --multi_gpu, starts one); "
            f"use `torchrun --nproc_per_node {requested} -m wmrl_cli ...` "
            f"(train-policy, train-wm: --num-processes {requested})"
        )


def end_ranks(code: int = 0) -> None:
    """A rank's last act once its command ended with status `code`, where a process group was
    made (else nothing).

    Finished (0): every rank waits for the others (the main process may still be writing the
    policy), then the group is destroyed while the interpreter is whole. Left to the
    interpreter's exit, gloo's and NCCL's threads could be torn down in any order, and one of 31
    finished 2-rank runs ended in "terminate called without an active exception" (a non-zero
    status).

    Failed: the other ranks are gone or going (torchrun stops them once one fails), so no
    barrier can close the group in order, and the same teardown aborted 3 of 20 ranks whose
    collective had lost its peer (SIGABRT: status 134 in place of the rank's own 130, with
    "terminate called" on stderr). So the rank leaves here, its output flushed and its status
    its own, without the interpreter's teardown (`os._exit`): its run folders were already closed
    (cli/common.py `handle_errors`), and nothing else of a failed rank is left to write."""
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if not (dist.is_available() and dist.is_initialized()):
        return
    if code == 0:
        dist.barrier()
        dist.destroy_process_group()
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)


def exit_status(code: object) -> int:
    """The process status `sys.exit(code)` gives: 0 for None, the int, else 1 (a message)."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run_then_end_ranks(app: Callable[[], Any]) -> None:
    """Runs `app` (a Typer app, which ends in SystemExit) and ends this rank's process group as
    its status says (`end_ranks`): in order where it finished, at once where it failed. A bug's
    exception is printed first (the hook the interpreter would call at its exit): `wmrl`'s entry
    point."""
    try:
        app()
    except SystemExit as exc:
        end_ranks(exit_status(exc.code))
        raise
    except BaseException:
        sys.excepthook(*sys.exc_info())
        end_ranks(1)
        raise


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    # This process runs only torchrun's agent: every log line is its own ("failed (exitcode:
    # 2) local_rank: 0 ...", "Sending process N closing signal SIGTERM"); the ranks, other
    # processes, keep theirs.
    logging.disable(logging.CRITICAL)
    try:
        torchrun(argv)
    except ChildFailedError as exc:
        _, failure = exc.get_first_failure()
        return failure.exitcode if failure.exitcode > 0 else 128 - failure.exitcode
    except SignalException as exc:
        return 128 + int(exc.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
