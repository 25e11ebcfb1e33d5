"""Benchmark suites, ``puffer-bench run`` and ``puffer-bench profile``, module by job.

* :mod:`~appliance.bench.suite.definition`: what a suite asks to measure, read from
  ``bench/suites/<name>.yaml`` and checked key by key;
* :mod:`~appliance.bench.suite.steps`: a suite planned for a hardware profile as steps
  (:class:`~appliance.bench.suite.steps.SuiteRunner`), each measuring and recording its figures
  into the report, under the noise guard;
* :mod:`~appliance.bench.suite.training`: the training measurements (speed after warm-up, time to
  a score), the real trainer through the one training loop;
* :mod:`~appliance.bench.suite.session`: the ``run`` and ``profile`` commands start to end: report,
  progress, partial reports on a stop signal, the report's files.
"""
