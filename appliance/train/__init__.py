"""The PPO trainer: policies, advantages, the rollout/update loop, timings, checkpoints."""

from appliance.errors import TrainingError
from appliance.train.trainer import Trainer, make_policy

__all__ = ["Trainer", "TrainingError", "make_policy"]
