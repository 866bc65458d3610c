"""Host memory of a replicated resume: what each rank holds privately after loading the
checkpoint's optimizer state, read into its own memory against mapped from the file.

A replicated run (no FSDP) keeps a whole AdamW state on every rank, twice the policy's weights
in float32 (60 GB at 7.5 B), and every rank of a node loads the same `state_0.pt` when it
resumes. Read, each rank holds a private copy in host memory while it moves to the GPU; mapped
(`load_checkpoint`, since 2026-11-29), the ranks share the file's pages in the page cache.

    python benchmarks/resume_host_memory.py --params-m 64 --ranks 2 --out runs/resume-memory

Each rank is a process that builds the model and its optimizer, loads the checkpoint through
`safe_torch_load` as `load_checkpoint` does and reports its anonymous (private) and
file-backed resident memory from /proc/self/status after reading every page of the loaded
moments, as the optimizer's copy to its GPU does: the host memory of that copy's peak. (On the
CPU the state stays in host memory either way: `load_checkpoint` then copies it.) Writes
OUT/resume_host_memory.json and OUT/resume_host_memory.md.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import tempfile
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # the checkout's wmrl_cli

import harness  # noqa: E402
import torch  # noqa: E402

MIB = 2**20


def memory() -> dict[str, float]:
    """This process's resident memory in MiB: anonymous (its own) and file-backed (shared)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024  # kB -> MiB
    return fields


def build(params_m: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A stack of square layers with about `params_m` million parameters, and AdamW over them."""
    width = 2048
    layers = max(1, round(params_m * 1e6 / (width * width)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def write_checkpoint(run_dir: Path, params_m: int) -> Path:
    """One checkpoint of the model after one AdamW step (its moments filled)."""
    from wmrl_cli.training.checkpoints import save_checkpoint

    model, optimizer = build(params_m)
    model(torch.randn(4, model[0].in_features)).square().mean().backward()
    optimizer.step()
    save_model = lambda path: path.mkdir(parents=True)  # noqa: E731 (the optimizer is measured)
    return save_checkpoint(run_dir, 1, save_model, [optimizer])


def rank(checkpoint: Path, params_m: int, mapped: bool, start, queue) -> None:
    """One rank's resume: build, wait for every rank, load the optimizer state as
    `load_checkpoint` does (mapped; read, before 2026-11-29), read every page of it as the
    optimizer's copy to its GPU does, report."""
    from wmrl_cli.rewards.loading import safe_torch_load

    model, optimizer = build(params_m)  # what a rank holds before it resumes
    before = memory()
    start.wait()  # every rank loads at once, as on a node
    state = safe_torch_load(checkpoint / "training_state" / "state_0.pt", mmap=mapped)
    moments = [t for s in state["state"].values() for t in (s["exp_avg"], s["exp_avg_sq"])]
    for tensor in moments:
        tensor.sum()
    after = memory()
    moments = sum(t.numel() * t.element_size() for t in moments) / MIB
    queue.put(
        {
            "anon_added_mib": after["RssAnon"] - before["RssAnon"],
            "file_added_mib": after["RssFile"] - before["RssFile"],
            "state_mib": moments,
        }
    )


def measure(checkpoint: Path, params_m: int, ranks: int, mapped: bool) -> list[dict]:
    ctx = mp.get_context("spawn")
    start, queue = ctx.Barrier(ranks), ctx.Queue()
    procs = [
        ctx.Process(target=rank, args=(checkpoint, params_m, mapped, start, queue))
        for _ in range(ranks)
    ]
    for proc in procs:
        proc.start()
    rows = [queue.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    return rows


def table(results: dict) -> str:
    lines = [
        f"Resume of a replicated optimizer state ({results['state_mib']:.0f} MiB: AdamW's two "
        f"moments of {results['params_m']} M float32 parameters), {results['ranks']} ranks "
        "loading the same checkpoint at once",
        "",
        "| loading | private host memory added per rank (MiB) | of the state | file pages "
        "per rank (MiB, shared) |",
        "|---|---|---|---|",
    ]
    for mode in ("read", "mapped"):
        rows = results[mode]
        anon = sum(r["anon_added_mib"] for r in rows) / len(rows)
        files = sum(r["file_added_mib"] for r in rows) / len(rows)
        share = anon / results["state_mib"]
        lines.append(f"| {mode} | {anon:,.0f} | {share:.0%} | {files:,.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = harness.parser(__doc__, out=True)
    parser.add_argument(
        "--params-m", type=harness.positive, default=64, help="model size, M parameters"
    )
    parser.add_argument("--ranks", type=harness.positive, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_checkpoint(Path(tmp), args.params_m)
        results = {
            "params_m": args.params_m,
            "ranks": args.ranks,
            "read": measure(checkpoint, args.params_m, args.ranks, mapped=False),
            "mapped": measure(checkpoint, args.params_m, args.ranks, mapped=True),
        }
    results["state_mib"] = results["mapped"][0]["state_mib"]
    harness.write(args, "resume_host_memory", results, table(results))


if __name__ == "__main__":
    harness.main(main)
