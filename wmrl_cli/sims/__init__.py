"""Real simulators behind the env interface, and their scripted experts."""

import os

# Offscreen rendering without a display, decided before anything imports mujoco (Meta-World's
# experts import it before the simulator does; with GLFW and no display, MuJoCo fails).
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
