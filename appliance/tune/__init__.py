"""Timing to choose settings: the vector-layout search behind ``puffer-bench autotune``
(:mod:`~appliance.tune.autotune`) and ``train``'s self-tuning (:mod:`~appliance.tune.selftune`).
What ``train`` may try, its keep rule and its store stay in :mod:`appliance.config.autotune`, which
measures nothing. Above :mod:`appliance.bench` and :mod:`appliance.train`, whose pieces it times."""
