"""The `lerobot` section of the run config: how a LeRobotDataset v3 given as `--data` becomes
episodes, and how `wmrl rollout --format lerobot` / `wmrl convert` write one
(docs/formats.md#lerobotdataset-v3)."""

from __future__ import annotations

from pydantic import Field

from wmrl_cli.config.section import Section


class LerobotConfig(Section):
    camera: str | None = Field(
        None,
        description="the camera: a video or image feature (observation.images.NAME, or NAME); "
        "default the dataset's only one. Export: the camera's NAME (default simulator.camera)",
    )
    action_key: str = Field("action", description="the action feature")
    state_key: str | None = Field(
        None,
        description="the state feature, whose statistics go into the policy's proprio entry "
        "(default observation.state where there is one)",
    )
    task: str | None = Field(
        None, description="the instruction of every episode, instead of the dataset's tasks"
    )
    success: str = Field(
        "auto",
        description="where success comes from: auto (the first of the columns next.success, "
        "success, next.reward, reward, else an episode column success), a frame column, "
        "episode:COLUMN (a per-episode flag: success after the last action), or last_frame "
        "(every episode a successful demonstration)",
    )
    success_threshold: float = Field(
        1.0, description="a numeric success or reward column: success where value >= this"
    )
    fps: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="frames per second: reading, every k-th frame of the dataset's (it must "
        "divide them; default all); writing, the dataset's fps (default eval.video_fps)",
    )
    image_size: int | None = Field(
        None, ge=16, le=512, description="frame side read (default simulator.image_size)"
    )
    revision: str | None = Field(None, description="Hub dataset: branch, tag or commit")
    cache_dir: str | None = Field(
        None, description="where converted datasets are kept (default ~/.cache/wmrl/lerobot)"
    )
