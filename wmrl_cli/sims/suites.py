"""Embedded task suites: Meta-World tasks whose success is visible in the camera image."""

from __future__ import annotations

from dataclasses import dataclass

from wmrl_cli.errors import ConfigError

# Cameras defined in every Meta-World Sawyer scene.
CAMERAS = ("corner", "corner2", "corner3", "corner4", "topview", "behindGripper", "gripperPOV")


@dataclass(frozen=True)
class Task:
    name: str  # Meta-World environment name without the version suffix
    instruction: str
    expert: str  # class name in metaworld.policies


@dataclass(frozen=True)
class Suite:
    name: str
    tasks: tuple[Task, ...]
    description: str

    @property
    def task_names(self) -> list[str]:
        return [t.name for t in self.tasks]


_MW10 = (
    Task("door-open", "open the door", "SawyerDoorOpenV3Policy"),
    Task("drawer-open", "open the drawer", "SawyerDrawerOpenV3Policy"),
    Task("drawer-close", "close the drawer", "SawyerDrawerCloseV3Policy"),
    Task(
        "button-press-topdown", "press the button from the top", "SawyerButtonPressTopdownV3Policy"
    ),
    Task("window-open", "slide the window open", "SawyerWindowOpenV3Policy"),
    Task("window-close", "slide the window closed", "SawyerWindowCloseV3Policy"),
    Task("handle-press", "press the handle down", "SawyerHandlePressV3Policy"),
    Task("coffee-button", "push the button on the coffee machine", "SawyerCoffeeButtonV3Policy"),
    Task("plate-slide", "slide the plate into the goal", "SawyerPlateSlideV3Policy"),
    Task("lever-pull", "pull the lever up", "SawyerLeverPullV3Policy"),
)

SUITES: dict[str, Suite] = {
    "mw10": Suite("mw10", _MW10, "ten Meta-World v3 tasks whose success shows in the image"),
    "mw3": Suite("mw3", _MW10[:3], "three Meta-World tasks, for quick checks"),
    "mw2": Suite("mw2", (_MW10[6], _MW10[7]), "two short tasks (under 40 expert steps), for smoke"),
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ConfigError(f"unknown suite '{name}': expected one of {', '.join(SUITES)}")
    return SUITES[name]
