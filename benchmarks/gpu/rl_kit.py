"""The kit an RL arm needs on a lent GPU machine, under the device tool's 64 MiB: a run's stage
config with its inputs copied beside it, and the packages the machine's image lacks.

    python benchmarks/gpu/rl_kit.py --stage runs/ce-long-verified-s0/stage1/config.yaml \\
        [--out .gpu_rl] [--wheels DIR]

writes OUT/config.yaml (the stage's, its paths pointing into OUT), OUT/world_model,
OUT/policy, OUT/reward_model, OUT/reset_set, OUT/metaworld.zip (Meta-World with only the assets
of the suite's tasks) and OUT/wheels (MuJoCo's, Gymnasium's and what they import: PyOpenGL,
glfw, farama-notifications); the wheels the image needs
besides (benchmarks/gpu/device_wheels.sh: transformers, diffusers, pydantic) travel in .whl/.
Two cuts keep it small, each checked here:
- Meta-World's wheel is 35 MB, 31 of them textures other tasks use: the assets kept are those
  the ten tasks' model files reach (their `file=` references, followed through includes).
  `--check` renders mw10's starts and a chunk with both packages: the frames are identical.
- The reset set keeps every episode and field; frames no reset entry reads (a start's context
  is the frames up to its step: step 0 and the keyframes) are zeroed, which compressed costs
  next to nothing. The reset entries built from it equal the original's.
Then, on the machine: benchmarks/gpu/rl_arm_device.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import yaml

from wmrl_cli.errors import WmrlError

# What the simulator imports that the machine's image lacks, besides Meta-World (first seen
# missing there, one by one, on 2026-11-29)
WHEELS = ("mujoco", "gymnasium", "PyOpenGL", "glfw", "farama-notifications")
# The machine's image has Python 3.12 (docs/benchmarks.md, "Full size on one GPU")
PLATFORM = [
    "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
    "--platform", "manylinux2014_x86_64",
]  # fmt: skip


def referenced_assets(package: Path, model_files: list[Path]) -> set[Path]:
    """Every file the model XMLs reach through `file=` references (includes followed)."""
    seen: set[Path] = set()

    def walk(path: Path) -> None:
        path = path.resolve()
        if path in seen:
            return
        seen.add(path)
        for match in re.finditer(r'file="([^"]+)"', path.read_text(errors="ignore")):
            for base in [path.parent, *path.parents][:6]:
                candidate = base / match.group(1)
                if candidate.is_file():
                    if candidate.suffix == ".xml":
                        walk(candidate)
                    else:
                        seen.add(candidate.resolve())
                    break

    for model in model_files:
        walk(model)
    return {p for p in seen if package.resolve() in p.parents}


def trim_metaworld(site: Path, tasks: list[str]) -> int:
    """Deletes from `site`/metaworld the assets (other than model XMLs) the tasks do not use;
    returns the bytes removed. The model files are found with the local Meta-World."""
    import metaworld
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE as envs

    local = Path(metaworld.__file__).parent
    models = [Path(envs[f"{t}-v3-goal-observable"](seed=0).model_name) for t in tasks]
    keep = {p.relative_to(local.resolve()) for p in referenced_assets(local, models)}
    removed = 0
    for path in (site / "metaworld" / "assets").rglob("*"):
        rel = path.relative_to(site / "metaworld")
        if path.is_file() and path.suffix != ".xml" and rel not in keep:
            removed += path.stat().st_size
            path.unlink()
    return removed


def blank_unread_frames(source: Path, out: Path, context_frames: int) -> None:
    """A copy of the episode store `source` whose frames no reset entry reads are zeroed."""
    from wmrl_cli.data.kir import read_keyframes

    shutil.copytree(source, out)
    keyframes: dict[int, list[int]] = {}
    for key in read_keyframes(out):
        keyframes.setdefault(key.episode_id, []).append(key.step)
    index = json.loads((out / "index.json").read_text())
    for row in index["episodes"]:
        path = out / row["file"]
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        read = np.zeros(len(arrays["frames"]), bool)
        for step in [0, *keyframes.get(int(row["id"]), [])]:
            read[max(step - context_frames + 1, 0) : step + 1] = True
        arrays["frames"] = np.where(read[:, None, None, None], arrays["frames"], 0)
        np.savez_compressed(path, **arrays)


# The stage's inputs the kit copies: (section, field) -> the folder's name in the kit
INPUTS = {
    ("world_model", "path"): "world_model",
    ("policy", "name"): "policy",
    ("reward_model", "path"): "reward_model",
    ("world_model", "reset_set"): "reset_set",
}


def stage_inputs(stage: Path) -> dict:
    """The stage's config, read and checked before anything is written: each input it names
    must be a folder here (a one-line error otherwise)."""
    try:
        cfg = yaml.safe_load(stage.read_text())
    except yaml.YAMLError as exc:
        raise WmrlError(f"--stage {stage}: not YAML ({str(exc).splitlines()[0]})") from None
    for section, field in INPUTS:
        value = (cfg.get(section) or {}).get(field) if isinstance(cfg, dict) else None
        if not value or not Path(value).is_dir():
            raise WmrlError(
                f"--stage {stage}: {section}.{field} is {value!r}, expected a folder here "
                "(a stage config of a run whose inputs are on this machine)"
            )
    return cfg


def build(stage: Path, out: Path, wheels: Path) -> None:
    """The kit in a folder beside OUT, renamed onto it when whole: a failure leaves OUT as it
    was."""
    cfg = stage_inputs(stage)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:
        part = Path(tmp) / "kit"
        part.mkdir()
        _fill(cfg, part, out, wheels)
        if out.exists():
            shutil.rmtree(out)
        part.rename(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {size / 2**20:.1f} MiB")


def _fill(cfg: dict, part: Path, out: Path, wheels: Path) -> None:
    """Writes the kit into `part`; the config's paths point to where it will be, `out`."""
    for (section, field), name in INPUTS.items():
        if name != "reset_set":
            shutil.copytree(cfg[section][field], part / name)
            cfg[section][field] = str(out / name)
    context = int(cfg["world_model"].get("context_frames", 4) or 4)
    blank_unread_frames(Path(cfg["world_model"]["reset_set"]), part / "reset_set", context)
    cfg["world_model"]["reset_set"] = str(out / "reset_set")
    (part / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    from importlib.metadata import version

    from wmrl_cli.sims.suites import SUITES

    wheels.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={version(name)}" for name in ("metaworld", *WHEELS)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM, "-d"]
    try:
        subprocess.run([*cmd, str(wheels), *pins], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        last = (exc.stderr or "").strip().splitlines()
        raise WmrlError(
            f"pip download of {' '.join(pins)} failed ({last[-1] if last else exc.returncode});"
            " expected the package registry to be reachable"
        ) from None
    (part / "wheels").mkdir()

    def wheel_of(name: str) -> Path:
        stem = f"{name.lower().replace('-', '_')}-{version(name)}-"
        (wheel,) = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(stem)]
        return wheel

    for name in WHEELS:  # as they are: unpacked, MuJoCo is 3 times larger
        shutil.copy(wheel_of(name), part / "wheels")
    tasks = [t.name for t in SUITES[cfg["simulator"].get("suite", "mw10")].tasks]
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel_of("metaworld")) as z:
            z.extractall(tmp)
        removed = trim_metaworld(Path(tmp), tasks)
        with zipfile.ZipFile(part / "metaworld.zip", "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(Path(tmp).rglob("*")):
                if path.is_file():
                    z.write(path, path.relative_to(tmp))
    print(f"Meta-World: {removed / 2**20:.1f} MiB of other tasks' assets cut")


def check(kit: Path) -> None:
    """mw10's starts and one chunk rendered with the local Meta-World and with the kit's: the
    frames must be equal."""
    script = (
        "import sys, numpy as np\n"
        "from wmrl_cli.config.schema import SimulatorConfig\n"
        "from wmrl_cli.sims.metaworld_sim import MetaWorldSim\n"
        "cfg = SimulatorConfig(suite='mw10', image_size=64, num_envs=10, num_workers=0, seed=7,"
        " max_steps=20)\n"
        "sim = MetaWorldSim(cfg, num_envs=10)\n"
        "a = sim.reset(list(range(10))).images\n"
        "b = sim.chunk_step(np.full((10, 4, 4), 0.3, np.float32)).obs.images\n"
        "np.save(sys.argv[1], np.stack([a, b]))\n"
        "sim.close()\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(kit / "metaworld.zip") as z:
            z.extractall(Path(tmp) / "site")
        frames = []
        for name, extra in (("local", []), ("kit", [str(Path(tmp) / "site")])):
            env = {**os.environ, "MUJOCO_GL": "egl"}
            env["PYTHONPATH"] = ":".join([*extra, str(Path.cwd())])
            target = Path(tmp) / f"{name}.npy"
            subprocess.run([sys.executable, "-c", script, str(target)], env=env, check=True)
            frames.append(np.load(target))
        if not np.array_equal(*frames):
            raise WmrlError("the trimmed Meta-World renders other frames than the local one")
    print("check: mw10's frames are identical with the trimmed Meta-World")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", type=Path, required=True, help="a stage's config.yaml")
    parser.add_argument("--out", type=Path, default=Path(".gpu_rl"))
    parser.add_argument("--wheels", type=Path, default=Path(tempfile.gettempdir()) / "rl-wheels")
    parser.add_argument("--check", action="store_true", help="render mw10 with both packages")
    args = parser.parse_args(argv)
    try:
        if not args.stage.is_file():
            raise WmrlError(
                f"--stage {args.stage}: no such config (expected RUN/stage1/config.yaml)"
            )
        build(args.stage, args.out, args.wheels)
        if args.check:
            check(args.out)
    except WmrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
