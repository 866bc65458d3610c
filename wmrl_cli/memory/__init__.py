"""The memory plan, before anything large loads: parameter counts on the meta device
(param_counts.py), a policy-training run's per-GPU plan in three phases (plan.py), whether it
fits the GPU and what to change where it does not (budget.py: `train-policy`, `sft`, co-evolve's
RL stages), and a world model's training plan (world_model.py: `train-wm`, co-evolve's
world-model stages)."""
