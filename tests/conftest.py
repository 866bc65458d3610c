"""Shared fixtures: a few recorded expert episodes of a small Meta-World setting, train-policy's
tiny inputs built from them (`assets`), and a local Hugging Face Hub (`hub`)."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
# a subprocess (a rank, a CLI run) that crashes in native code prints its Python stack, which
# the test's failure message then shows: one train-wm run over 2 gloo ranks was seen to end in
# SIGSEGV (exit 139) under a loaded suite on 2026-11-29, and did not again in 8 reruns
os.environ.setdefault("PYTHONFAULTHANDLER", "1")
# pytest-xdist's workers start with COLUMNS=80 and LINES=24, which rich's consoles would fix as
# their size when wmrl_cli.logging is imported; the output tests set $COLUMNS themselves.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.helpers.sims import small_sim_config  # noqa: E402

# Tiny models gain nothing from intra-op threads, and on a 2-core machine shared with simulator
# workers oversubscribed threads make them an order of magnitude slower.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def expert_episodes():
    """One expert episode per mw3 task (in-process simulator), recorded with sim states."""
    from wmrl_cli.envs.runner import iter_episodes
    from wmrl_cli.sims.experts import ExpertPolicy
    from wmrl_cli.sims.metaworld_sim import MetaWorldSim

    cfg = small_sim_config(max_steps=120)
    with MetaWorldSim(cfg) as sim:
        policy = ExpertPolicy(sim.suite)
        return list(
            iter_episodes(
                sim,
                policy,
                [0, 1, 2],
                chunk_size=cfg.chunk_size,
                seed_of=lambda i: cfg.seed + i,
                suite=cfg.suite,
            )
        )


@pytest.fixture(scope="module")
def assets(tmp_path_factory, expert_episodes):
    """A tiny SFT policy, an untrained tiny OpenSora world model and ResNet reward model at
    32x32, and the expert episodes as the reset set (tests/helpers/train_policy.py). Built once
    per test module that asks for it."""
    from tests.helpers.train_policy import write_assets

    return write_assets(tmp_path_factory.mktemp("rl"), expert_episodes)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A running local hub (repos under tmp_path/hub) with the client pointed at it
    (tests/helpers/hub_server.py)."""
    from tests.helpers.hub_server import point_client_at, serve_hub

    root = tmp_path / "hub"
    root.mkdir()
    with serve_hub(root) as server:
        point_client_at(monkeypatch, server, tmp_path / "hf_home")
        yield server


@pytest.fixture
def one_torch_thread():
    """Tests of tiny models run torch on one thread: a second OpenMP thread buys little, and on
    a busy 2-core machine oversubscribed threads run 10-100x slower. Used as
    `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
