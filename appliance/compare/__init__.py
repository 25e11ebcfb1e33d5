"""Reports against reports: ``compare`` (metric by metric, ratios with intervals), ``selftest`` (one
machine against itself, a suite twice) and ``ab`` (two variants measured in turns on one machine).
Above :mod:`appliance.bench`, whose reports it reads and whose suites it runs; below
:mod:`appliance.publish`, which compares with it."""
