"""Many machines, one view: a static site of every report, and each metric's history across commits.

:mod:`.collect` reads every report under some folders through the one validator and groups them by
machine and series (reports of another schema version are listed, not dropped); :mod:`.history`
finds the steps in a metric's history across commits (asv-style: a change in level significant
given the samples' noise); :mod:`.site` renders the static site (machines, leaderboards raw and
calibration-normalized, a page per metric, comparisons with ``compare``'s verdicts);
:mod:`.shared` adds a report to a folder many machines write into, atomically.

Above ``bench``: it reads reports with :func:`appliance.bench.report.load` and compares them with
:func:`appliance.compare.compare.compare`; its pages escape as the HTML report does (jinja2 autoescape).
"""

from __future__ import annotations

from appliance.publish.collect import Collection, collect, find_machine
from appliance.publish.shared import add_report
from appliance.publish.site import publish

__all__ = ["Collection", "add_report", "collect", "find_machine", "publish"]
