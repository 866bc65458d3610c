"""Draws docs/images/house.png: the floors of tests/test_house.py, top floor first, each with what
it holds; the jobs floor and co-evolve with the one function each job is (green).

    python docs/images/house.py docs/images/house.png

tests/test_house.py checks that FLOORS below names the same floors, in the same order, as the
test that enforces them."""

import sys

# (wings, what they hold, job functions or None) top floor first
FLOORS = [
    ("__main__", "python -m wmrl_cli", None),
    (
        "cli/",
        "one module per command: options -> config -> one job -> printing · stage_ranks",
        None,
    ),
    ("coevolve/", "pipeline · run_state · stage_cache · stages · gate · report", "co_evolve"),
    (
        "jobs/",
        "train_policy · sft · evaluate_policy · collect_rollouts · imagine_policy · "
        "imagine_replay · check_models · audit_policy · plan | inputs, assembly",
        "train_policy · train_bc · evaluate_in_simulator · collect_rollouts · "
        "imagine_*_rollouts · check_world_model · audit_policy",
    ),
    (
        "rl/",
        "RL math (pure functions) · trainer · buffer · schedule · policy start · judge audit",
        None,
    ),
    (
        "memory/",
        "parameter counts · the per-GPU plan · its budget · a world model's training plan",
        None,
    ),
    (
        "training/",
        "world-model trainer · reward trainer · init sources · checkpoints · latent cache · "
        "sharding",
        None,
    ),
    (
        "evaluation/",
        "policy eval · reliability · open loop · hand tracking · policy shift · "
        "simulator replay · reports · stats",
        None,
    ),
    ("policies/", "registry (expert | random | checkpoint) · the OpenVLA-OFT family", None),
    ("sims/", "Meta-World and LIBERO behind the env interface · scripted experts · workers", None),
    (
        "envs/  assets/",
        "env interface · closed loop · imagined env · simulator envs   |   published assets",
        None,
    ),
    (
        "data/",
        "episode store · KIR keyframes · reset sets · imagined episodes · windows · LeRobot",
        None,
    ),
    (
        "world_models/  rewards/",
        "Wan, OpenSora, factory, loaders, published layouts   |   success classifiers, calibration",
        None,
    ),
    (
        "runtime  run_dirs  ranks",
        "seeds · threads · precision   |   run directories   |  "
        " starting ranks, their errors, their end",
        None,
    ),
    ("config/", "typed run config · coevolve section · presets · --set", None),
    ("logging", "console · progress · TensorBoard and metrics.jsonl", None),
    ("trackers", "W&B and Trackio beside them", None),
    ("files/", "atomic writes · safe loading", None),
    ("errors", "WmrlError · ConfigError", None),
]


def draw(out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    W, row, gap, top = 13.2, 0.52, 0.045, 1.15
    H = top + len(FLOORS) * (row + gap) + 0.35
    fig = plt.figure(figsize=(W, H), dpi=100)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, W)
    ax.set_ylim(H, 0)
    ax.axis("off")
    ink, grey = "#1f2d3d", "#6b7785"
    ax.text(0.2, 0.32, "wmrl_cli: the house", fontsize=17, color=ink, va="center", weight="bold")
    ax.text(
        0.2,
        0.68,
        "top floor first; a floor imports only from the floors below it (tests/test_house.py). "
        "Green: the jobs, one function each, which the commands and co-evolve call.",
        fontsize=9.5,
        color="#44505c",
        va="center",
    )
    x0, x1 = 0.92, W - 0.15
    for i, (wings, holds, jobs) in enumerate(FLOORS):
        y = top + i * (row + gap)
        green = jobs is not None
        face, edge = ("#e5f3e8", "#6fa77e") if green else ("#e7eff8", "#9db4cc")
        ax.add_patch(
            FancyBboxPatch(
                (x0, y),
                x1 - x0,
                row,
                boxstyle="round,pad=0,rounding_size=0.05",
                facecolor=face,
                edgecolor=edge,
                linewidth=1.1,
            )
        )
        ax.text(x0 + 0.12, y + 0.1, f"floor {len(FLOORS) - i}", fontsize=7, color=grey, va="center")
        ax.text(x0 + 0.12, y + 0.31, wings, fontsize=11.5, color=ink, va="center", weight="bold")
        tx = x0 + 2.85
        if green:
            ax.text(tx, y + 0.16, holds, fontsize=9, color="#2b3640", va="center")
            ax.text(
                tx, y + 0.38, jobs, fontsize=8.6, color="#2e7d45", va="center", family="monospace"
            )
        else:
            ax.text(tx, y + row / 2, holds, fontsize=9.5, color="#2b3640", va="center")
    ybot = top + len(FLOORS) * (row + gap) - gap
    ax.add_patch(
        FancyArrowPatch(
            (0.45, top + 0.05),
            (0.45, ybot),
            arrowstyle="-|>",
            mutation_scale=18,
            color="#8a9aab",
            linewidth=2.2,
        )
    )
    ax.text(
        0.25,
        (top + ybot) / 2,
        "imports go down",
        rotation=90,
        fontsize=9.5,
        color=grey,
        va="center",
        ha="center",
    )
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    draw(sys.argv[1])
