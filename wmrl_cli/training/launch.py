"""`python -m wmrl_cli.training.launch TORCHRUN-ARGS`: torchrun for `--num-processes`, without
its own output. The ranks say what went wrong themselves (one line, a traceback only for a
bug); torchrun's log lines and its ChildFailedError traceback would repeat it in 30 lines.
Exits with the status of the rank that failed first (128 + N for a rank killed by signal N),
or 128 + N when torchrun itself got signal N (Ctrl-C: 130)."""

from __future__ import annotations

import logging
import sys


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
