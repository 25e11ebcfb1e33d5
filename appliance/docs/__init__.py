"""Docs tooling: what writes generated parts of the documentation from the code and the reports.

:mod:`~appliance.docs.modules` writes docs/architecture.md's module table from each module's
docstring (``make docs-modules``; a test fails when the table is stale).
"""
