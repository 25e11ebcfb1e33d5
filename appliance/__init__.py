"""puffer-bench: a reinforcement-learning benchmark-and-training appliance."""

__version__ = "0.1.0"
