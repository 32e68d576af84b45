"""MemoryGym-Interactive-v0 and its evaluation: on-policy conversations with simulated users.

| module | holds |
|---|---|
| `env` | `InteractiveEnv` (`MemoryGym-Interactive-v0`): the simulated user talks, the assistant answers, questions and probes after each period |
| `runner` | `memgym evaluate`: every user and period of a world into a run folder, resumable |
| `run_files` | the run folder's layout (`run.json`, `users/<user>/period_<pp>/`) |
| `workers` | `--workers N`: the users split over N processes |
| `checks` | the upper bound, the period's new facts and the factual-recall check |
| `metrics` | accuracy, random baseline, memory score, write/read/utilization diagnosis, factual recall |
| `results` | per-period arrays, the table, the plots and run comparisons |
| `evolution` | the self-evolution loop of an assistant's memory prompt |
"""

from memgym_env.interactive.env import InteractiveEnv

__all__ = ["InteractiveEnv"]
