"""Measuring without fooling yourself: statistics of repeated samples (:mod:`~appliance.measure.stats`:
medians, intervals, ratio tests, Holm's correction) and the noise guard
(:mod:`~appliance.measure.noise`: was the machine quiet while a figure was measured). Used by the
benchmark suites, ``compare``, ``ab``, sweeps and the publish history; below them all, above
:mod:`appliance.sysinfo` (the speed loops the guard reruns)."""
