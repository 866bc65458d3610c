"""The jobs the commands and co-evolve's stages run, one file each: train_policy.py, sft.py,
evaluate_policy.py, collect_rollouts.py, imagine_policy.py, imagine_replay.py, check_models.py,
audit_policy.py and plan.py (`train-policy --plan`); what they share: inputs.py (a run's inputs
resolved and checked before anything loads) and assembly.py (the policy, this rank's env, its
verdict line, the evaluation callback)."""
