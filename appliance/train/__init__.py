"""The PPO trainer: policies, advantages, the rollout/update loop, timings, checkpoints."""

from appliance.errors import TrainingError
from appliance.train.make import make_policy
from appliance.train.trainer import Trainer

__all__ = ["Trainer", "TrainingError", "make_policy"]
