"""Starting ranks: `run_ranks` runs a module on N processes through torchrun (`train-policy`,
`train-wm` and `sft --num-processes N`, co-evolve's stages on ranks), and this module is the
torchrun it starts.

`python -m wmrl_cli.training.launch TORCHRUN-ARGS`: torchrun without its own output. The ranks
say what went wrong themselves (one line, a traceback only for a bug); torchrun's log lines and
its ChildFailedError traceback would repeat it in 30 lines. Exits with the status of the rank
that failed first (128 + N for a rank killed by signal N), or 128 + N when torchrun itself got
signal N (Ctrl-C: 130)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Any

# A parameter whose gradient has a size-1 dimension of another stride (a vision tower's
# register tokens at batch 1, a slice of the grad of a concatenation) makes DDP warn once
# per rank; that dimension's stride does not matter, the copy into the bucket is the same.
_RANK_WARNINGS = "ignore:Grad strides do not match bucket view strides:UserWarning"


# Set in the ranks `run_ranks` starts: the process that started them says "interrupted" once.
LAUNCHED_BY_WMRL = "WMRL_RANKS_LAUNCHER"


def rank_environment() -> dict[str, str]:
    """The ranks' environment: OMP_NUM_THREADS 1 where unset, as torchrun would set it but
    without its banner (`num_threads` sets each rank's torch threads), and DDP's warning
    about gradient strides filtered."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONWARNINGS"] = ",".join(filter(None, (env.get("PYTHONWARNINGS"), _RANK_WARNINGS)))
    env[LAUNCHED_BY_WMRL] = str(os.getpid())
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(num_processes: int, module: str, argv: list[str]) -> int:
    """`python -m module argv` on `num_processes` ranks of this machine (gloo on CPU, NCCL on
    GPUs); waits for them and returns their status (0: every rank succeeded). Ctrl-C stops
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
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    before[sig] = signal.signal(sig, forward)
        torchrun = subprocess.Popen(cmd, env=rank_environment())
        try:
            return torchrun.wait()
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
