"""Starting ranks: `run_ranks` runs a module on N processes through torchrun (`train-policy`,
`train-wm` and `sft --num-processes N`, co-evolve's stages on ranks), and this module is the
torchrun it starts.

`python -m wmrl_cli.training.launch TORCHRUN-ARGS`: torchrun without its own output; torchrun's
log lines and its ChildFailedError traceback would repeat the ranks' error in 30 lines. Exits
with the status of the rank that failed first (128 + N for a rank killed by signal N), or
128 + N when torchrun itself got signal N (Ctrl-C: 130).

A rank that stops on a user's error (the CLI's one line) writes that line for the process that
started it (`write_rank_error`) rather than printing it, and `run_ranks` returns the distinct
lines: eight ranks that fail alike say it once; ranks that fail differently are named. A bug's
traceback is printed by its rank, as it happens."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmrl_cli.errors import ConfigError, WmrlError

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
