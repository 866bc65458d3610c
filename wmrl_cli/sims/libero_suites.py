"""LIBERO task suites and OpenVLA-OFT's evaluation conventions, as plain data and numpy.

Nothing here imports LIBERO: suite and task lookup, instructions, the episode limits, the
gripper convention, image orientation and the (task, trial) of an init id work without the
`libero` extra, so that configuration errors show before anything heavy loads. The task lists
repeat LIBERO's `libero_suite_task_map` (task order 0); a test checks them against the
installed package.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wmrl_cli.config.schema import SimulatorConfig
from wmrl_cli.errors import ConfigError
from wmrl_cli.sims.suites import Suite, Task

ACTION_DIM = 7  # end-effector delta xyz, delta axis-angle, gripper
PROPRIO_DIM = 8  # eef position, eef axis-angle, two gripper finger positions
NUM_STEPS_WAIT = 10  # OpenVLA-OFT: dummy steps at reset while objects settle
DUMMY_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)  # stand still, gripper open
INIT_STATES_PER_TASK = 50
CAMERAS = ("agentview", "robot0_eye_in_hand")
IMAGE_SIZE = 256  # the seeds' policies and world models see 256x256 frames


@dataclass(frozen=True)
class LiberoSuite:
    name: str
    task_files: tuple[str, ...]  # bddl / init-state file stems, in LIBERO's task order 0
    max_steps: int  # OpenVLA-OFT's limit: the longest training demo plus a margin
    description: str

    @property
    def instructions(self) -> list[str]:
        return [task_language(name) for name in self.task_files]

    def as_suite(self) -> Suite:
        """The suite as the rest of wmrl sees it; LIBERO has no scripted experts."""
        tasks = tuple(Task(n, task_language(n), expert="") for n in self.task_files)
        return Suite(self.name, tasks, self.description)


def task_language(task_file: str) -> str:
    """The instruction LIBERO derives from a task's file name (`Task.language`): the words
    after the scene prefix of LIBERO-10/90 names, underscores as spaces."""
    if task_file[:1].isupper():
        offset = 8 if "SCENE10" in task_file else 7
        task_file = task_file[task_file.find("SCENE") + offset :]
    return task_file.replace("_", " ")


def _bowl(where: str) -> str:
    return f"pick_up_the_black_bowl_{where}_and_place_it_on_the_plate"


def _basket(item: str) -> str:
    return f"pick_up_the_{item}_and_place_it_in_the_basket"


LIBERO_SUITES: dict[str, LiberoSuite] = {
    "libero_spatial": LiberoSuite(
        "libero_spatial",
        tuple(
            _bowl(w)
            for w in (
                "between_the_plate_and_the_ramekin",
                "next_to_the_ramekin",
                "from_table_center",
                "on_the_cookie_box",
                "in_the_top_drawer_of_the_wooden_cabinet",
                "on_the_ramekin",
                "next_to_the_cookie_box",
                "on_the_stove",
                "next_to_the_plate",
                "on_the_wooden_cabinet",
            )
        ),
        220,
        "LIBERO-Spatial: one bowl, ten layouts",
    ),
    "libero_object": LiberoSuite(
        "libero_object",
        tuple(
            _basket(item)
            for item in (
                "alphabet_soup",
                "cream_cheese",
                "salad_dressing",
                "bbq_sauce",
                "ketchup",
                "tomato_sauce",
                "butter",
                "milk",
                "chocolate_pudding",
                "orange_juice",
            )
        ),
        280,
        "LIBERO-Object: ten objects into the basket",
    ),
    "libero_goal": LiberoSuite(
        "libero_goal",
        (
            "open_the_middle_drawer_of_the_cabinet",
            "put_the_bowl_on_the_stove",
            "put_the_wine_bottle_on_top_of_the_cabinet",
            "open_the_top_drawer_and_put_the_bowl_inside",
            "put_the_bowl_on_top_of_the_cabinet",
            "push_the_plate_to_the_front_of_the_stove",
            "put_the_cream_cheese_in_the_bowl",
            "turn_on_the_stove",
            "put_the_bowl_on_the_plate",
            "put_the_wine_bottle_on_the_rack",
        ),
        300,
        "LIBERO-Goal: one scene, ten goals",
    ),
    "libero_10": LiberoSuite(
        "libero_10",
        (
            "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket",
            "LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket",
            "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it",
            "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet_and_close_it",
            "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_"
            "white_mug_on_the_right_plate",
            "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy",
            "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate_and_put_the_chocolate_pudding_"
            "to_the_right_of_the_plate",
            "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_basket",
            "KITCHEN_SCENE8_put_both_moka_pots_on_the_stove",
            "KITCHEN_SCENE6_put_the_yellow_and_white_mug_in_the_microwave_and_close_it",
        ),
        520,
        "LIBERO-10 (Long): ten long-horizon tasks",
    ),
}


def is_libero_suite(name: str) -> bool:
    return name in LIBERO_SUITES


def get_libero_suite(name: str) -> LiberoSuite:
    if name not in LIBERO_SUITES:
        raise ConfigError(
            f"unknown LIBERO suite '{name}': expected one of {', '.join(LIBERO_SUITES)}"
        )
    return LIBERO_SUITES[name]


def task_and_trial(init_id: int, num_tasks: int) -> tuple[int, int]:
    """init_id = trial * num_tasks + task (wmrl's trial-major order); trial t starts from the
    suite's fixed init state t (mod 50, for collections longer than the 50 states)."""
    if init_id < 0:
        raise ValueError(f"init ids are non-negative, got {init_id}")
    return init_id % num_tasks, (init_id // num_tasks) % INIT_STATES_PER_TASK


def libero_sim_config(cfg: SimulatorConfig) -> SimulatorConfig:
    """`cfg` with LIBERO's settings wherever the config left a Meta-World default: backend
    name, camera, 256x256 images and the suite's episode limit. Values the user set stay."""
    suite = get_libero_suite(cfg.suite)
    given = cfg.model_fields_set
    update: dict[str, object] = {"name": "libero"}
    if "camera" not in given:
        update["camera"] = CAMERAS[0]
    if "image_size" not in given:
        update["image_size"] = IMAGE_SIZE
    if "max_steps" not in given:
        update["max_steps"] = suite.max_steps
    out = cfg.model_copy(update=update)
    if out.camera not in CAMERAS:
        raise ConfigError(
            f"invalid value for 'simulator.camera': '{out.camera}' is not a LIBERO camera "
            f"({', '.join(CAMERAS)})"
        )
    return out


# -- actions, images, proprioception (OpenVLA-OFT's run_libero_eval) ----------------------


def to_libero_actions(actions: np.ndarray) -> np.ndarray:
    """Policy actions [..., 7] -> LIBERO's. The policy's gripper is OpenVLA's [0 = close,
    1 = open]; LIBERO wants -1 = open, +1 = close: map to [-1, 1], binarize with sign
    (OpenVLA-OFT's normalize_gripper_action), then flip (invert_gripper_action)."""
    out = np.array(actions, dtype=np.float64, copy=True)
    if out.shape[-1] != ACTION_DIM:
        raise ValueError(f"LIBERO actions have {ACTION_DIM} dims, got shape {out.shape}")
    out[..., -1] = -np.sign(2.0 * out[..., -1] - 1.0)
    return out


def from_libero_actions(actions: np.ndarray) -> np.ndarray:
    """LIBERO's actions [..., 7] (what an episode store records) -> policy actions that
    `to_libero_actions` turns back into them: the gripper (-1 open, +1 close, 0) becomes
    OpenVLA's (1 open, 0 close, 0.5). Replays of stored episodes go through it."""
    out = np.array(actions, dtype=np.float32, copy=True)
    if out.shape[-1] != ACTION_DIM:
        raise ValueError(f"LIBERO actions have {ACTION_DIM} dims, got shape {out.shape}")
    out[..., -1] = (1.0 - np.sign(out[..., -1])) / 2.0
    return out


def upright(image: np.ndarray) -> np.ndarray:
    """LIBERO's camera images come upside down and mirrored (OpenGL rows bottom-up): rotate
    by 180 degrees, as OpenVLA-OFT does before training and evaluation."""
    return np.ascontiguousarray(image[::-1, ::-1])


def quat2axisangle(quat: np.ndarray) -> np.ndarray:
    """(x, y, z, w) quaternion -> axis-angle 3-vector (robosuite's convention)."""
    q = np.asarray(quat, dtype=np.float64)
    w = min(max(float(q[3]), -1.0), 1.0)
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return q[:3] * 2.0 * math.acos(w) / den


def proprio_from_obs(obs: dict[str, np.ndarray]) -> np.ndarray:
    """OpenVLA-OFT's 8-dim state: eef position, eef axis-angle, gripper finger positions."""
    return np.concatenate(
        [
            np.asarray(obs["robot0_eef_pos"], dtype=np.float64),
            quat2axisangle(obs["robot0_eef_quat"]),
            np.asarray(obs["robot0_gripper_qpos"], dtype=np.float64),
        ]
    )
