"""A report as one self-contained HTML page: the same content as the Markdown, plots inline as
base64 PNG, rendered by a jinja2 template with autoescape (report content cannot add markup).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from appliance.bench.report.content import (
    METRIC_COLUMNS,
    SUMMARY_NOTE,
    header_facts,
    metric_cells,
    section_rows,
)
from appliance.bench.report.content import (
    sections as metric_sections,
)
from appliance.measure.noise.table import NOISE_COLUMNS, NOISE_NOTE, noise_table
from appliance.sysinfo import machine_facts

# Autoescape is on: every value from the report is escaped; nothing in the template is marked safe.
HTML_TEMPLATE = """\
<!doctype html><html><head><meta charset=utf-8><title>{{ title }}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:.4em .8em;margin:.4em 0}
.busy{color:#b00;font-weight:bold}img{max-width:100%}code{font-size:90%}
</style></head><body><h1>{{ title }}</h1><ul>
<li>Created {{ h['created'] }} by <code>{{ h['command'] }}</code></li>
<li>Machine: {{ h['machine'] }}</li>
<li>Versions: puffer-bench {{ h['puffer_bench'] }}, Python {{ h['python'] }}, torch {{ h['torch'] }}, git {{ h['git'] }}</li>
<li>Seed {{ h['seed'] }}, {{ h['repeats'] }} repeats per measurement; took {{ h['took'] }} s</li></ul>
<p>{{ note }}</p>
{% for w in warnings %}<div class=warn><b>Warning:</b> {{ w }}</div>
{% endfor %}{% for s in skipped %}<div class=warn>Skipped {{ s['what'] }}: {{ s['why'] }}</div>
{% endfor %}{% if roofline %}<h2>Roofline</h2><ul>{% for r in roofline %}<li>{{ r['summary'] }}</li>{% endfor %}</ul>
{% endif %}{% for env, t in training %}<h2>Training bottleneck: {{ env }}</h2><p>{{ t['summary'] }}</p><ul>
{% for s in t.get('suggestions') or [] %}<li>{{ s }}</li>{% endfor %}</ul>
{% endfor %}{% for title, rows in sections %}<h2>{{ title }}</h2>
<table><tr>{% for c in metric_columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for name, busy, c in rows %}<tr><td><code>{{ name }}</code>{% if busy %} <span class=busy>busy</span>{% endif %}</td>\
<td class=num>{{ c['median'] }}</td><td class=num>{{ c['range'] }}</td><td class=num>{{ c['ci'] }}</td>\
<td class=num>{{ c['cv'] }}</td><td class=num>{{ c['unit'] }}</td><td class=num>{{ c['ceiling'] }}</td></tr>
{% endfor %}</table>
{% endfor %}{% if images %}<h2>Plots</h2>
{% for alt, data in images %}<p><img alt="{{ alt }}" src="data:image/png;base64,{{ data }}"></p>
{% endfor %}{% endif %}{% if noise %}<h2>Noise guard</h2><p>{{ noise_note }}</p>
<table><tr>{% for c in noise_columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for cells, busy in noise %}<tr>{% for c in cells[:-1] %}<td>{{ c }}</td>{% endfor %}\
<td>{% if busy %}<span class=busy>busy</span>: {% endif %}{{ cells[-1] }}</td></tr>
{% endfor %}</table>
{% endif %}<h2>Machine fingerprint</h2>
<table><tr><th></th><th></th></tr>
{% for k, v in facts %}<tr><td>{{ k }}</td><td>{{ v }}</td></tr>
{% endfor %}</table>
</body></html>
"""


@functools.cache
def _html_template() -> Any:
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(HTML_TEMPLATE)


def to_html(report: dict[str, Any], images: Sequence[tuple[str, bytes]] = ()) -> str:
    """One self-contained HTML page: the same content as the Markdown, plots inline as base64 PNG.

    Rendered by a jinja2 template with autoescape: report content cannot add markup."""
    import base64

    h = header_facts(report)
    analysis = report.get("analysis") or {}
    metrics = report["metrics"]
    sections = []
    for _, title in metric_sections():
        rows = [
            (name, bool((m.get("noise") or {}).get("busy")), metric_cells(m))
            for name, m in section_rows(metrics, title)
        ]
        if rows:
            sections.append((title, rows))
    return _html_template().render(
        title=f"puffer-bench report: suite {h['suite']}, profile {h['profile']}",
        h=h,
        note=SUMMARY_NOTE,
        warnings=report.get("warnings") or [],
        skipped=report.get("skipped") or [],
        roofline=analysis.get("roofline") or [],
        training=list((analysis.get("training") or {}).items()),
        sections=sections,
        metric_columns=METRIC_COLUMNS,
        images=[(suffix, base64.b64encode(data).decode()) for suffix, data in images],
        noise=noise_table(report),
        noise_note=NOISE_NOTE,
        noise_columns=NOISE_COLUMNS,
        facts=[(k, v) for k, v in machine_facts(report["fingerprint"]).items() if v is not None],
    )
