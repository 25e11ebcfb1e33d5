"""The static site: machines, leaderboards, one page per metric with its history, and comparisons.

Every page is rendered by a jinja2 template with autoescape, as the HTML report is
(:mod:`appliance.bench.report.html`): nothing from a report is marked safe, and the plots are SVG
written by the templates from numbers. Strings from reports are also cut to
:data:`MAX_SHOWN` characters where shown (a 12 MB CPU name is a few lines, not 12 MB on every
page), and bidi controls and lone surrogates are shown as U+FFFD (a report cannot reorder what a
page says, and every page is valid UTF-8). Page file names are digests, never report text.

The site is self-contained: no CDN, no server, no fetch; it opens from ``file://``. It is built
into a temporary folder beside ``out`` and put in place whole; an existing ``out`` is replaced
only when it is a site this command built (its marker file says so).
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from appliance.bench import report as rpt
from appliance.bench.report.content import SECTIONS
from appliance.compare import compare as cmp
from appliance.errors import ReportError
from appliance.publish import history
from appliance.publish.collect import Collection, Entry, digest, short_commit, slug
from appliance.report_io import umask

MAX_SHOWN = 300
MARKER = ".puffer-bench-site"
FAMILIES = tuple(
    (prefix, title)
    for prefix, title in SECTIONS
    if prefix in ("probe/", "env_sps/", "vector_sps/", "train_sps/", "time_to_score/")
)
# shown as U+FFFD: bidi embeddings, overrides and isolates, and lone surrogates
UNSHOWN = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\ud800-\udfff]")


def shown(value: Any, most: int = MAX_SHOWN) -> str:
    text = "-" if value is None else str(value)
    if len(text) > most:
        return f"{text[:most]}... ({len(text):,} characters)"
    return text


BASE = """\
<!doctype html><html lang=en><head><meta charset=utf-8>
<meta name=viewport content="width=device-width, initial-scale=1"><title>{{ title|short }}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1400px;margin:1.5em auto;padding:0 1em;color:#222}
nav{margin-bottom:1em;padding-bottom:.5em;border-bottom:1px solid #ddd}nav a{margin-right:1em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.unreliable{color:#b00;font-weight:bold}.regression{color:#b00;font-weight:bold}.improvement{color:#070;font-weight:bold}
.note{color:#555}code{font-size:90%;overflow-wrap:anywhere}td{overflow-wrap:break-word}
svg{background:#fafafa;border:1px solid #ddd;max-width:100%}.plot text{font-size:11px;fill:#444}
</style></head><body>
<nav><a href="{{ root }}index.html">Reports</a><a href="{{ root }}machines.html">Machines</a>\
{% for f in families %}<a href="{{ root }}{{ f.page }}">{{ f.title }}</a>{% endfor %}\
<a href="{{ root }}metrics.html">Metrics</a><a href="{{ root }}compare.html">Compare</a></nav>
<h1>{{ title|short }}</h1>
{% block body %}{% endblock %}
<p class=note>Built by puffer-bench publish {{ built }} from {{ n_reports }} reports.</p>
</body></html>
"""

INDEX = """{% extends "base" %}{% block body %}
<p>{{ n_reports }} reports of {{ n_machines }} machines, {{ n_metrics }} metrics.
{{ n_steps }} steps found across commits ({{ n_regressions }} of them regressions beyond {{ threshold_pct }}%).</p>
<h2>Reports</h2>
<table id=reports><tr><th>date (UTC)</th><th>machine</th><th>suite</th><th>profile</th><th>commit</th><th>metrics</th><th>file</th></tr>
{% for r in reports %}<tr><td>{{ r.created|short }}</td><td><a href="machines.html#{{ r.machine }}">{{ r.machine }}</a></td>\
<td>{{ r.suite|short }}</td><td>{{ r.profile|short }}</td><td><code>{{ r.commit|short }}</code></td><td class=num>{{ r.n }}</td><td><code>{{ r.path|short }}</code></td></tr>
{% endfor %}</table>
<h2>Files not shown</h2>
{% if skipped %}<p>JSON files under the folders that are not reports this puffer-bench reads. Reports of another schema version come first.</p>
<table id=skipped><tr><th>file</th><th>why</th></tr>
{% for s in skipped %}<tr><td><code>{{ s.path|short }}</code></td><td>{% if s.other_version %}<span class=unreliable>other schema version</span>: {% endif %}{{ s.why|short }}</td></tr>
{% endfor %}</table>{% else %}<p>None: every JSON file under the folders is a report.</p>{% endif %}
{% endblock %}"""

MACHINES = """{% extends "base" %}{% block body %}
<p>A machine is one CPU model, family/model/stepping, core count, GPU set and RAM size (the host id
changes with every boot, so it is listed, not used). Calibration: the fixed loops every report runs
(integer M ops/s, float GFLOP/s, memory copy GB/s) and the share of a core they got.</p>
<table id=machines><tr><th>machine</th><th>CPU</th><th>GPU</th><th>cores (physical / logical / usable)</th><th>RAM GiB</th>\
<th>calibration int / float / copy</th><th>CPU share</th><th>profiles</th><th>suites</th><th>reports</th><th>first - last</th><th>host ids</th></tr>
{% for m in machines %}<tr id="{{ m.id }}"><td><code>{{ m.id }}</code></td><td>{{ m.cpu|short }}</td><td>{{ m.gpu|short }}</td>\
<td>{{ m.cores|short }}</td><td class=num>{{ m.ram|short }}</td><td class=num>{{ m.calibration|short }}</td><td class=num>{{ m.share|short }}</td>\
<td>{{ m.profiles|short }}</td><td>{{ m.suites|short }}</td><td class=num>{{ m.n }}</td><td class=num>{{ m.span|short }}</td><td><code>{{ m.hosts|short }}</code></td></tr>
{% endfor %}</table>{% endblock %}"""

LEADERBOARD = """{% extends "base" %}{% block body %}
<p>Per metric, the newest report of each machine, suite and profile that holds it: the median with
its 95% interval, raw and normalized by the calibration to the CPU of <a href="machines.html#{{ ref_id }}">{{ ref_id }}</a>
({{ ref_label|short }}) for CPU-bound figures (compute loops for speeds, the copy loop for memory bandwidth;
GPU figures are not normalized). Figures the noise guard marked busy or slowed are shown as such and not ranked.</p>
{% for t in tables %}<h2 id="{{ t.anchor }}"><a href="{{ t.page }}"><code>{{ t.metric|short }}</code></a></h2>
<p class=note>{{ t.unit|short }}, {{ t.better }} is better</p>
<table class=board><tr><th>rank</th><th>machine</th><th>suite / profile</th><th>commit</th><th>median</th><th>95% CI</th>\
<th>normalized rank</th><th>normalized median</th><th>normalized 95% CI</th><th>noise guard</th></tr>
{% for r in t.rows %}<tr><td class=num>{% if r.flag %}-{% else %}{{ r.rank }}{% endif %}</td>\
<td><a href="machines.html#{{ r.machine }}">{{ r.machine }}</a> {{ r.label|short }}</td><td>{{ r.suite|short }}</td><td><code>{{ r.commit|short }}</code></td>\
<td class=num>{{ r.median }}</td><td class=num>{{ r.ci }}</td><td class=num>{% if r.flag %}-{% else %}{{ r.nrank }}{% endif %}</td>\
<td class=num>{{ r.nmedian }}</td><td class=num>{{ r.nci }}</td><td>{% if r.flag %}<span class=unreliable>{{ r.flag }}</span>{% endif %}</td></tr>
{% endfor %}</table>{% endfor %}
{% if not tables %}<p>No report holds a metric of this family.</p>{% endif %}{% endblock %}"""

METRICS = """{% extends "base" %}{% block body %}
<table id=metrics><tr><th>metric</th><th>unit</th><th>series</th><th>reports</th><th>steps</th><th>newest step</th></tr>
{% for m in metrics %}<tr><td><a href="{{ m.page }}"><code>{{ m.name|short }}</code></a></td><td>{{ m.unit|short }}</td>\
<td class=num>{{ m.series }}</td><td class=num>{{ m.reports }}</td><td class=num>{{ m.steps }}</td><td class="{{ m.newest_class }}">{{ m.newest|short }}</td></tr>
{% endfor %}</table>{% endblock %}"""

METRIC = """{% extends "base" %}{% block body %}
<p>{{ unit|short }}, {{ better }} is better. One history per machine, suite and profile: a point per commit
(every report at that commit pooled), in the order the commits were first measured; the bars are 95% intervals
of the median. Hollow red points were measured busy or slowed (noise guard): shown, never judged. Dashed lines mark
steps, changes in level significant given the samples' noise (threshold {{ threshold_pct }}% for the verdicts).</p>
{% for s in series %}<h2 id="{{ s.anchor }}"><a href="../machines.html#{{ s.machine }}">{{ s.machine }}</a> {{ s.label|short }}; suite {{ s.suite|short }}, profile {{ s.profile|short }}</h2>
{% set p = s.plot %}<svg class=plot role=img aria-label="history plot" width="{{ p.w }}" height="{{ p.h }}" viewBox="0 0 {{ p.w }} {{ p.h }}" xmlns="http://www.w3.org/2000/svg">
<line x1="{{ p.x0 }}" y1="{{ p.y1 }}" x2="{{ p.x1 }}" y2="{{ p.y1 }}" stroke="#999"/><line x1="{{ p.x0 }}" y1="{{ p.y0 }}" x2="{{ p.x0 }}" y2="{{ p.y1 }}" stroke="#999"/>
<text x="4" y="{{ p.y0 + 4 }}">{{ p.top }}</text><text x="4" y="{{ p.y1 }}">{{ p.bottom }}</text>
{% for st in p.steps %}<line x1="{{ st.x }}" y1="{{ p.y0 }}" x2="{{ st.x }}" y2="{{ p.y1 }}" stroke="{{ st.color }}" stroke-dasharray="4 3"/>\
<text x="{{ st.x + 3 }}" y="{{ p.y0 + 10 }}" fill="{{ st.color }}">{{ st.text|short(40) }}</text>
{% endfor %}{% if p.line %}<polyline fill="none" stroke="#36c" points="{{ p.line }}"/>{% endif %}
{% for q in p.points %}<line x1="{{ q.x }}" y1="{{ q.lo }}" x2="{{ q.x }}" y2="{{ q.hi }}" stroke="#888"/>\
<circle cx="{{ q.x }}" cy="{{ q.y }}" r="3.5" {% if q.flag %}fill="#fff" stroke="#b00"{% else %}fill="#36c"{% endif %}><title>{{ q.title|short(120) }}</title></circle>
{% endfor %}<text x="{{ p.x0 }}" y="{{ p.h - 4 }}">{{ p.first|short(20) }}</text><text x="{{ p.x1 }}" y="{{ p.h - 4 }}" text-anchor="end">{{ p.last|short(20) }}</text>
</svg>
{% if s.steps %}<ul class=steps>{% for st in s.steps %}<li class="{{ st.verdict }}">{{ st.text|short }}</li>{% endfor %}</ul>
{% else %}<p class=note>{{ s.no_steps }}</p>{% endif %}
<table class=history><tr><th>commit</th><th>date (UTC)</th><th>reports</th><th>samples</th><th>median</th><th>95% CI</th><th></th><th>compare</th></tr>
{% for q in s.rows %}<tr><td><code>{{ q.commit|short }}</code></td><td>{{ q.created|short }}</td><td class=num>{{ q.reports }}</td><td class=num>{{ q.n }}</td>\
<td class=num>{{ q.median }}</td><td class=num>{{ q.ci }}</td><td>{% if q.flag %}<span class=unreliable>{{ q.flag }}</span>{% endif %}</td>\
<td>{% if q.compare %}<a href="../{{ q.compare }}">with the previous</a>{% endif %}</td></tr>
{% endfor %}</table>{% endfor %}{% endblock %}"""

COMPARE_INDEX = """{% extends "base" %}{% block body %}
<p>Two reports side by side with the same verdicts as <code>puffer-bench compare</code>. Built for every
report against the one before it on its machine (same suite and profile), the newest reports of different machines
of one suite, and the pairs given with <code>--pair</code> (<code>--all-pairs</code>: every two reports of one suite,
older as the base). Pick two reports:</p>
<p><label>base <select id=base>{% for r in reports %}<option value="{{ r.id }}" data-path="{{ r.path|short }}">{{ r.label|short(160) }}</option>{% endfor %}</select></label><br>
<label>new <select id=new>{% for r in reports %}<option value="{{ r.id }}" data-path="{{ r.path|short }}">{{ r.label|short(160) }}</option>{% endfor %}</select></label></p>
<p id=picked class=note>Pick two reports.</p>
<h2>Comparisons built</h2><table id=pairs><tr><th>base</th><th>new</th><th>regressions</th></tr>
{% for c in pairs %}<tr><td>{{ c.a|short(160) }}</td><td>{{ c.b|short(160) }}</td>\
<td><a class=pair data-pair="{{ c.key }}" href="{{ c.page }}">{{ c.summary }}</a></td></tr>
{% endfor %}</table>
<script>
(function () {
  var base = document.getElementById("base"), added = document.getElementById("new");
  var out = document.getElementById("picked");
  function pick() {
    var link = document.querySelector('a.pair[data-pair="' + base.value + "-" + added.value + '"]');
    out.textContent = "";
    if (link) {
      var a = document.createElement("a");
      a.href = link.getAttribute("href");
      a.textContent = "open this comparison";
      out.appendChild(a);
    } else {
      var paths = [base, added].map(function (s) { return s.options[s.selectedIndex].dataset.path; });
      out.textContent = "Not built: puffer-bench compare " + paths.join(" ") +
        " (or publish again with --pair " + paths.join(" ") + ")";
    }
  }
  base.addEventListener("change", pick);
  added.addEventListener("change", pick);
})();
</script>{% endblock %}"""

COMPARE = """{% extends "base" %}{% block body %}
<ul><li>base: {{ a|short }}</li><li>new: {{ b|short }}</li></ul>
<p><code>puffer-bench compare {{ a_path|short }} {{ b_path|short }}</code> gives the same verdicts.</p>
{% if differences %}<h2>What differs</h2><table id=differences><tr><th></th><th>base</th><th>new</th></tr>
{% for k, v in differences %}<tr><td>{{ k|short }}</td><td>{{ v[0]|short }}</td><td>{{ v[1]|short }}</td></tr>{% endfor %}</table>{% endif %}
{% for n in notes %}<p class=note>{{ n|short(2000) }}</p>{% endfor %}
<h2>Metrics (threshold {{ threshold_pct }}%)</h2>
<table id=comparison><tr><th>metric</th><th>unit</th><th>median base</th><th>median new</th><th>ratio new/base (95% CI), verdict</th></tr>
{% for r in rows %}<tr><td><code>{{ r.metric|short }}</code></td><td>{{ r.unit|short }}</td><td class=num>{{ r.m0 }}</td><td class=num>{{ r.m1 }}</td>\
<td class="{{ r.cls }}">{{ r.text|short }}</td></tr>
{% endfor %}</table>
{% if not_common %}<p class=note>Not in both reports (left out): {{ not_common|short(2000) }}</p>{% endif %}
{% if regressions %}<p class=regression>Regressed beyond the threshold: {{ regressions|short(2000) }}</p>{% endif %}
{% endblock %}"""

TEMPLATES = {
    "base": BASE,
    "index": INDEX,
    "machines": MACHINES,
    "leaderboard": LEADERBOARD,
    "metrics": METRICS,
    "metric": METRIC,
    "compare_index": COMPARE_INDEX,
    "compare": COMPARE,
}


@functools.cache
def _env() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.DictLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["short"] = shown
    return env


def _range(lo: float | None, hi: float | None, unit: str) -> str:
    return "-" if lo is None or hi is None else f"{rpt.fmt(lo, unit)} - {rpt.fmt(hi, unit)}"


class Site:
    """Pages for a collection, rendered into a folder."""

    def __init__(
        self,
        collection: Collection,
        threshold: float = 0.05,
        pairs: list[tuple[str, str]] = (),  # type: ignore[assignment]
        all_pairs: bool = False,
    ) -> None:
        self.c = collection
        self.threshold = threshold
        self.extra_pairs = list(pairs)
        self.all_pairs = all_pairs
        self.pages: dict[str, str] = {}
        self.built = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        self.families = [
            {"prefix": p, "title": t.split(" (")[0], "page": f"board-{p.strip('/')}.html"}
            for p, t in FAMILIES
        ]
        self.metric_page = {name: f"metric/{slug(name)}.html" for name in collection.metric_names()}
        self.series = collection.series()
        self.histories: dict[tuple[str, str, str, str], tuple[list[history.Point], list[history.Step]]] = {}
        for key, entries in self.series.items():
            name = key[0]
            better = entries[-1].data["metrics"][name]["better"]
            pts = history.points(name, entries)
            self.histories[key] = (pts, history.steps(pts, better, threshold))
        self.compares: dict[tuple[str, str], str] = {}

    # ---------------------------------------------------------------- rendering
    def render(self, template: str, page: str, **values: Any) -> None:
        root = "../" * page.count("/")
        text = (
            _env()
            .get_template(template)
            .render(
                root=root,
                families=self.families,
                built=self.built,
                n_reports=len(self.c.reports),
                threshold_pct=f"{100 * self.threshold:g}",
                **values,
            )
        )
        self.pages[page] = UNSHOWN.sub("\ufffd", text)

    def build(self) -> dict[str, str]:
        self._compares()
        self._index()
        self._machines()
        for family in self.families:
            self._leaderboard(family)
        self._metrics()
        return self.pages

    # ---------------------------------------------------------------- pages
    def _index(self) -> None:
        steps = [s for _, found in self.histories.values() for s in found]
        self.render(
            "index",
            "index.html",
            title="puffer-bench reports",
            n_machines=len(self.c.machines),
            n_metrics=len(self.metric_page),
            n_steps=len(steps),
            n_regressions=sum(s.verdict == "regression" for s in steps),
            reports=[
                {
                    "created": e.created[:16].replace("T", " "),
                    "machine": e.machine,
                    "suite": e.suite,
                    "profile": e.profile,
                    "commit": short_commit(e.commit),
                    "n": len(e.data["metrics"]),
                    "path": e.shown,
                }
                for e in sorted(self.c.reports, key=lambda e: e.created, reverse=True)
            ],
            skipped=sorted(self.c.skipped, key=lambda s: (not s.other_version, s.path)),
        )

    def _machines(self) -> None:
        rows = []
        for m in self.c.machines.values():
            f = m.facts
            cal = [
                f.get(k)
                for k in (
                    "calibration int (M ops/s)",
                    "calibration float (GFLOP/s)",
                    "calibration copy (GB/s)",
                )
            ]
            dates = sorted(e.created for e in m.reports)
            rows.append(
                {
                    "id": m.id,
                    "cpu": " ".join(
                        str(x)
                        for x in (
                            f.get("CPU"),
                            f.get("microarchitecture") and f"({f.get('microarchitecture')})",
                        )
                        if x
                    ),
                    "gpu": rpt.gpu_label(m.reports[-1].data["fingerprint"]),
                    "cores": f"{shown(f.get('physical cores'))} / {shown(f.get('logical cores'))} / {shown(f.get('usable cores'))}",
                    "ram": f.get("RAM GiB"),
                    "calibration": " / ".join(shown(x) for x in cal)
                    if any(x is not None for x in cal)
                    else "none",
                    "share": f.get("calibration CPU share"),
                    "profiles": ", ".join(sorted({e.profile for e in m.reports})),
                    "suites": ", ".join(sorted({e.suite for e in m.reports})),
                    "n": len(m.reports),
                    "span": f"{dates[0][:10]} to {dates[-1][:10]}",
                    "hosts": ", ".join(sorted(m.host_ids)) or "-",
                }
            )
        self.render("machines", "machines.html", title="Machines", machines=rows)

    def _reference(self) -> Entry | None:
        """The report whose CPU the normalized figures are scaled to: the newest calibrated report of
        the machine with the most calibrated reports."""
        best: tuple[int, str] | None = None
        for m in self.c.machines.values():
            calibrated = [e for e in m.reports if cmp.calibration_ratios(e.data, e.data)]
            if calibrated and (best is None or (len(calibrated), m.id) > best):
                best = (len(calibrated), m.id)
        if best is None:
            return None
        return [e for e in self.c.machines[best[1]].reports if cmp.calibration_ratios(e.data, e.data)][-1]

    def _leaderboard(self, family: dict[str, str]) -> None:
        ref = self._reference()
        tables = []
        for name in sorted(n for n in self.metric_page if n.startswith(family["prefix"])):
            newest: dict[tuple[str, str, str], Entry] = {}
            for (metric, mid, suite, profile), entries in self.series.items():
                if metric == name:
                    newest[(mid, suite, profile)] = entries[-1]
            rows = []
            unit = better = ""
            for (mid, suite, profile), e in newest.items():
                m = e.data["metrics"][name]
                unit, better = m["unit"], m["better"]
                flag = history._flag(m)
                ci = m.get("ci")
                row = {
                    "machine": mid,
                    "label": self.c.machines[mid].label,
                    "suite": f"{suite} / {profile}",
                    "commit": short_commit(e.commit),
                    "value": m.get("median"),
                    "median": rpt.fmt(m.get("median"), unit),
                    "ci": _range(*(ci or (None, None)), unit),
                    "flag": flag,
                    "nvalue": None,
                    "nmedian": "-",
                    "nci": "-",
                }
                ratios = cmp.calibration_ratios(ref.data, e.data) if ref else None
                kind = cmp.cpu_bound(name, e.data)
                if ratios and kind and m.get("median") and better != "info":
                    scale = 1 / ratios[kind] if better == "higher" else ratios[kind]
                    row["nvalue"] = m["median"] * scale
                    row["nmedian"] = rpt.fmt(row["nvalue"], unit)
                    row["nci"] = _range(ci[0] * scale, ci[1] * scale, unit) if ci else "-"
                elif kind is None:
                    row["nmedian"] = "not CPU-bound"
                else:
                    row["nmedian"] = "no calibration"
                rows.append(row)
            for key, rank in (("value", "rank"), ("nvalue", "nrank")):
                ranked = [r for r in rows if not r["flag"] and r[key] is not None and better != "info"]
                ranked.sort(key=lambda r: r[key], reverse=better == "higher")
                for r in rows:
                    r[rank] = "-"
                for i, r in enumerate(ranked, start=1):
                    r[rank] = i
            rows.sort(key=lambda r: (bool(r["flag"]), r["rank"] if isinstance(r["rank"], int) else 10**9))
            tables.append(
                {
                    "metric": name,
                    "anchor": "t-" + digest(name, size=8),
                    "page": self.metric_page[name],
                    "unit": unit,
                    "better": better,
                    "rows": rows,
                }
            )
        self.render(
            "leaderboard",
            family["page"],
            title=f"Leaderboard: {family['title']}",
            tables=tables,
            ref_id=ref.machine if ref else "-",
            ref_label=self.c.machines[ref.machine].label if ref else "no calibrated report",
        )

    def _metrics(self) -> None:
        listing = []
        for name, page in self.metric_page.items():
            keys = [k for k in self.series if k[0] == name]
            unit = better = ""
            series = []
            all_steps: list[history.Step] = []
            for key in keys:
                entries = self.series[key]
                m = entries[-1].data["metrics"][name]
                unit, better = m["unit"], m["better"]
                pts, found = self.histories[key]
                all_steps += found
                series.append(self._series(key, pts, found, unit))
            newest = max(all_steps, key=lambda s: s.created, default=None)
            listing.append(
                {
                    "name": name,
                    "page": page,
                    "unit": unit,
                    "series": len(keys),
                    "reports": sum(len(self.series[k]) for k in keys),
                    "steps": len(all_steps),
                    "newest": history.step_text(newest, unit) if newest else "-",
                    "newest_class": newest.verdict if newest else "",
                }
            )
            self.render("metric", page, title=name, unit=unit, better=better, series=series)
        self.render("metrics", "metrics.html", title="Metrics", metrics=listing)

    def _series(
        self, key: tuple[str, str, str, str], pts: list[history.Point], found: list[history.Step], unit: str
    ) -> dict[str, Any]:
        _, mid, suite, profile = key
        rows = []
        previous: Entry | None = None
        for p in pts:
            first = p.reports[0]
            page = self.compares.get((previous.id, first.id)) if previous else None
            rows.append(
                {
                    "commit": short_commit(p.commit),
                    "created": p.created[:16].replace("T", " "),
                    "reports": len(p.reports),
                    "n": len(p.samples),
                    "median": rpt.fmt(p.median, unit),
                    "ci": _range(*(p.ci or (None, None)), unit),
                    "flag": p.unreliable,
                    "compare": page,
                }
            )
            previous = p.reports[-1]
        if len([p for p in pts if p.judged]) < history.MIN_POINTS:
            no_steps = f"No step can be told from noise with fewer than {history.MIN_POINTS} judged commits."
        else:
            no_steps = "No step: no change in level is significant given the samples' noise."
        return {
            "anchor": "s-" + digest(*key, size=8),
            "machine": mid,
            "label": self.c.machines[mid].label,
            "suite": suite,
            "profile": profile,
            "plot": _plot(pts, found, unit),
            "steps": [{"text": history.step_text(s, unit), "verdict": s.verdict} for s in found],
            "no_steps": no_steps,
            "rows": rows,
        }

    # ---------------------------------------------------------------- comparisons
    def _pairs(self) -> list[tuple[Entry, Entry]]:
        pairs: list[tuple[Entry, Entry]] = []
        groups: dict[tuple[str, str, str], list[Entry]] = {}
        for e in sorted(self.c.reports, key=lambda e: e.created):
            groups.setdefault((e.machine, e.suite, e.profile), []).append(e)
        for entries in groups.values():
            pairs += list(itertools.pairwise(entries))
        by_suite: dict[str, list[Entry]] = {}
        for (_, suite, _), entries in sorted(groups.items()):
            by_suite.setdefault(suite, []).append(entries[-1])
        for newest in by_suite.values():
            for i, a in enumerate(newest):
                pairs += [(a, b) for b in newest[i + 1 :] if a.machine != b.machine]
        if self.all_pairs:
            suites: dict[str, list[Entry]] = {}
            for e in sorted(self.c.reports, key=lambda e: e.created):
                suites.setdefault(e.suite, []).append(e)
            pairs += [pair for entries in suites.values() for pair in itertools.combinations(entries, 2)]
        by_path = {e.shown: e for e in self.c.reports}
        by_resolved = {str(e.path.resolve()): e for e in self.c.reports}
        for a, b in self.extra_pairs:
            ea = by_path.get(a) or by_resolved.get(str(Path(a).resolve()))
            eb = by_path.get(b) or by_resolved.get(str(Path(b).resolve()))
            if ea is None or eb is None:
                missing = a if ea is None else b
                raise ReportError(f"--pair {missing}: not one of the reports under the folders given")
            pairs.append((ea, eb))
        unique = {(a.id, b.id): (a, b) for a, b in pairs if a.id != b.id}
        return list(unique.values())

    def _compares(self) -> None:
        built = []
        for a, b in self._pairs():
            try:
                result = cmp.compare(
                    [{**a.data, "_path": a.shown}, {**b.data, "_path": b.shown}], self.threshold
                )
            except ReportError as e:
                built.append({"a": a.label(), "b": b.label(), "key": "", "page": "", "summary": str(e)})
                continue
            page = f"compare/{a.id}-{b.id}.html"
            self.compares[(a.id, b.id)] = page
            rows = []
            for row in result["rows"]:
                x = row["ratios"][0]
                rows.append(
                    {
                        "metric": row["metric"],
                        "unit": row["unit"]
                        if row["better"] == "info"
                        else f"{row['unit']} ({row['better']} is better)",
                        "m0": rpt.fmt(row["medians"][0], row["unit"]),
                        "m1": rpt.fmt(row["medians"][1], row["unit"]),
                        "text": cmp.ratio_text(x),
                        "cls": {"regression": "regression", "improvement": "improvement"}.get(
                            x["verdict"], "unreliable" if x["verdict"] in (cmp.UNRELIABLE, cmp.SLOWED) else ""
                        ),
                    }
                )
            self.render(
                "compare",
                page,
                title="Compare two reports",
                a=a.label(),
                b=b.label(),
                a_path=a.shown,
                b_path=b.shown,
                differences=[(k, [shown(v) for v in vals]) for k, vals in result["differences"]],
                notes=result["notes"],
                rows=rows,
                not_common=", ".join(result["not_common"]),
                regressions=", ".join(result["regressions"]),
            )
            n = len(result["regressions"])
            built.append(
                {
                    "a": a.label(),
                    "b": b.label(),
                    "key": f"{a.id}-{b.id}",
                    "page": page,
                    "summary": f"{n} regression(s)" if n else "no regression",
                }
            )
        built = [c for c in built if c["page"]] + [c for c in built if not c["page"]]
        self.render(
            "compare_index",
            "compare.html",
            title="Compare",
            reports=[
                {"id": e.id, "label": e.label(), "path": e.shown}
                for e in sorted(self.c.reports, key=lambda e: e.created, reverse=True)
            ],
            pairs=[c for c in built if c["page"]],
        )


W, H, LEFT, RIGHT, TOP, BOTTOM = 760, 220, 70, 20, 16, 24


def _plot(pts: list[history.Point], found: list[history.Step], unit: str) -> dict[str, Any]:
    """A history plot's coordinates (numbers only; the template writes the SVG)."""
    values = [v for p in pts for v in (p.median, *(p.ci or ())) if v is not None]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo * 0.95 - 1e-12, hi * 1.05 + 1e-12
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    n = len(pts)

    def x(i: float) -> float:
        return round(LEFT + (W - LEFT - RIGHT) * ((i + 0.5) / n), 1)

    def y(v: float) -> float:
        return round(TOP + (H - TOP - BOTTOM) * (1 - (v - lo) / (hi - lo)), 1)

    out_points = []
    for i, p in enumerate(pts):
        if p.median is None:
            continue
        ci = p.ci or [p.median, p.median]
        out_points.append(
            {
                "x": x(i),
                "y": y(p.median),
                "lo": y(ci[0]),
                "hi": y(ci[1]),
                "flag": p.unreliable,
                "title": f"{short_commit(p.commit)} {p.created[:10]}: {rpt.fmt(p.median, unit)} {unit}"
                + (f" ({p.unreliable})" if p.unreliable else ""),
            }
        )
    judged = [
        q
        for q, p in zip(out_points, [p for p in pts if p.median is not None], strict=True)
        if not p.unreliable
    ]
    return {
        "w": W,
        "h": H,
        "x0": LEFT,
        "x1": W - RIGHT,
        "y0": TOP,
        "y1": H - BOTTOM,
        "top": rpt.fmt(hi, unit),
        "bottom": rpt.fmt(lo, unit),
        "points": out_points,
        "line": " ".join(f"{q['x']},{q['y']}" for q in judged),
        "steps": [
            {
                "x": x(s.index - 0.5),
                "color": {"regression": "#b00", "improvement": "#070"}.get(s.verdict, "#a60"),
                "text": f"{s.ratio:.3f}x {short_commit(s.commit)}",
            }
            for s in found
        ],
        "first": short_commit(pts[0].commit) if pts else "",
        "last": short_commit(pts[-1].commit) if pts else "",
    }


def write_site(pages: dict[str, str], out: str | Path) -> Path:
    """Write ``pages`` into a temporary folder beside ``out``, then put it in place of ``out``.

    ``out`` may be absent, an empty folder, or a site this command built before; anything else is
    refused (ReportError), so a folder of other files is never replaced."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ReportError(f"--out {out}: not a folder; pass a folder for the site")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise ReportError(
            f"--out {out}: a folder of other files (no {MARKER} marker); pass a new or empty folder"
        )
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
    try:
        for name, text in pages.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8"))
        (tmp / MARKER).write_text("built by puffer-bench publish\n")
        os.chmod(tmp, 0o777 & ~umask())
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=parent))
            os.replace(out, old / "site")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def publish(
    folders: list[str | Path],
    out: str | Path,
    threshold: float = 0.05,
    pairs: list[tuple[str, str]] = (),  # type: ignore[assignment]
    all_pairs: bool = False,
) -> dict[str, Any]:
    """Build the site of every report under ``folders`` into ``out``; what was built, for the CLI."""
    from appliance.publish.collect import collect

    collection = collect(folders)
    site = Site(collection, threshold, pairs, all_pairs)
    pages = site.build()
    write_site(pages, out)
    found = [s for _, f in site.histories.values() for s in f]
    return {
        "out": str(out),
        "pages": len(pages),
        "reports": len(collection.reports),
        "machines": len(collection.machines),
        "metrics": len(site.metric_page),
        "compares": len(site.compares),
        "steps": len(found),
        "regressions": sum(s.verdict == "regression" for s in found),
        "skipped": collection.skipped,
    }
