"""Co-evolution (`wmrl co-evolve`): the stage graph (pipeline.py), one run's state
(run_state.py), the stage cache (stage_cache.py), what each stage does (stages.py), the world
model's check before RL (gate.py) and the report (report.py)."""
