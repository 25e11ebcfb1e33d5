"""Docs tooling: what writes generated parts of the documentation from the code and the reports.

:mod:`~appliance.docs.modules` writes docs/architecture.md's module table from each module's
docstring (``python -m appliance.docs.modules``; a test fails when the table is stale);
:mod:`~appliance.docs.readme` writes the README's reference results table and plot from the newest
committed reports (``make readme-results``, ``puffer-bench report --readme``).
"""
