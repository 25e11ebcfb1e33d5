"""Benchmarks that are part of the product: suites, reports, the probe, env and vector speed, and
the metric registry (comparing reports lives in :mod:`appliance.compare`, tuning in
:mod:`appliance.tune`)."""
