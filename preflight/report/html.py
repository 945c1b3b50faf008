"""`--format html`: one self-contained page for the people who hand nodes to repair.

What is where: the verdict, counts and run id on top; filters (status, check, node text); the
failures first, grouped and folded over node ranges, each with its action, fix and evidence; a
node x check heat map whose identical rows are folded into node ranges (a cell opens its findings);
the node-mesh loss/RTT matrix and the device-mesh loss matrix drawn on canvases from the ping
metrics of the cluster results that carry them (found by their labels, not by check id). The URL fragment can carry a view
(`#status=fail&check=hccn.link&node=node01&cell=ROW,COL`), so a link in a ticket opens the page
filtered, with a cell's findings open.

Why this shape: the page must open from a `file://` URL on a laptop without network, and must
never phone home from inside a cluster. So CSS and script are inline, the data rides in the page
as JSON, and a Content-Security-Policy forbids every fetch (`default-src 'none'`). Everything that
came from a node is escaped here (html.escape) or put in the page as text by the script
(textContent), never as markup. The failures and the heat map are plain HTML, readable without
script; the script adds filters, the cell panel and the matrices.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
from typing import Any, Iterable

from ..model import SEVERITY, NodeStateKind, Report, Status
from ..nodeset import fold
from .group import CLUSTER, grouped

STATUSES = ("fail", "error", "warn", "pass", "skip")
MARK = {"fail": "✗", "error": "?", "warn": "!", "pass": "✓", "skip": "–"}
EVIDENCE_MAX = 800
CSP_FORMAT = ("default-src 'none'; style-src 'unsafe-inline'; script-src {scripts}; img-src data:; "
              "connect-src 'none'; form-action 'none'; base-uri 'none'")
VERDICT = {"ready": "READY", "not_ready": "NOT READY", "incomplete": "INCOMPLETE"}
MESH_METRICS = ("ping_loss", "ping_rtt")

e = html.escape


def _evidence(details: dict[str, Any]) -> str:
    """The details a person reads (metrics go to the matrices), cut to a readable size."""
    shown = {k: v for k, v in details.items() if k not in ("metrics", "matrix")}
    if not shown:
        return ""
    text = json.dumps(shown, ensure_ascii=False, default=str, indent=1)
    return text if len(text) <= EVIDENCE_MAX else text[:EVIDENCE_MAX] + " …"


def _script_json(data: Any) -> str:
    """JSON safe inside <script>: no `</script>`, no `<!--` from node text."""
    return json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":")) \
        .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# ------------------------------------------------------------------ data

def heat_rows(report: Report) -> tuple[list[str], list[tuple[list[str], list[str | None]]]]:
    """(checks, rows): rows of (nodes, status per check), nodes with an identical row folded into
    one, worst rows first, then inventory order."""
    checks = list(dict.fromkeys(r.check for r in report.results if r.node))
    cell: dict[str, dict[str, Status]] = {}
    for r in report.results:
        if r.node:
            row = cell.setdefault(r.node, {})
            if r.check not in row or SEVERITY[r.status] > SEVERITY[row[r.check]]:
                row[r.check] = r.status
    buckets: dict[tuple, list[str]] = {}
    for n in report.nodes:
        sig = tuple(cell.get(n.name, {}).get(c).value if c in cell.get(n.name, {}) else None for c in checks)
        buckets.setdefault(sig, []).append(n.name)
    rows = [(nodes, list(sig)) for sig, nodes in buckets.items()]
    rank = {s: SEVERITY[Status(s)] for s in STATUSES}
    rows.sort(key=lambda r: -max((rank[s] for s in r[1] if s), default=0))
    return checks, rows


def _cell_findings(report: Report, checks: list[str], rows) -> list[list[list[list[Any]]]]:
    """findings[row][check] = [[status, summary, action, fix, nodes label, evidence], ...]."""
    row_of = {n: i for i, (nodes, _) in enumerate(rows) for n in nodes}
    col = {c: j for j, c in enumerate(checks)}
    acc: list[list[dict[tuple, list[str]]]] = [[{} for _ in checks] for _ in rows]
    for r in report.results:
        if r.node and r.node in row_of:
            key = (r.status.value, r.summary, r.action, r.remediation if r.status.value in ("fail", "warn", "error")
                   else None, _evidence(r.details) if r.status.value != "pass" else "")
            acc[row_of[r.node]][col[r.check]].setdefault(key, []).append(r.node)
    return [[[[k[0], k[1], k[2], k[3], fold(v), k[4]] for k, v in cellmap.items()] for cellmap in row]
            for row in acc]


def mesh_results(report: Report) -> list[tuple[Any, bool]]:
    """The cluster summaries whose metrics form a mesh (ping_loss/ping_rtt labelled node and peer;
    with device and peer_device, a device mesh): found by their data, so a new mesh check needs no
    edit here."""
    out = []
    for r in report.results:
        if r.node is None:
            ms = [m for m in r.details.get("metrics") or () if isinstance(m, dict) and m.get("name") in MESH_METRICS]
            labels = (ms[0].get("labels") or {}) if ms else {}
            if "node" in labels and "peer" in labels:
                out.append((r, "device" in labels and "peer_device" in labels))
    return out


def mesh(summary, devices: bool, node_order: list[str] | None = None) -> dict[str, Any] | None:
    """Matrix data from the metrics of a mesh check's summary result: labels, and cells
    [src index, dst index, loss %, rtt ms or null]."""
    cells: dict[tuple[str, str], list[Any]] = {}
    for m in summary.details.get("metrics") or ():
        labels = m.get("labels") or {}
        src, dst = labels.get("node"), labels.get("peer")
        if not src or not dst:
            continue
        if devices:
            src, dst = f"{src}:{labels.get('device', '?')}", f"{dst}:{labels.get('peer_device', '?')}"
        c = cells.setdefault((src, dst), [None, None])
        if m.get("name") == "ping_loss":
            c[0] = m.get("value")
        elif m.get("name") == "ping_rtt":
            c[1] = m.get("value")
    if not cells:
        return None
    order = {n: i for i, n in enumerate(node_order or ())}

    def key(label: str):
        node, _, dev = label.partition(":")
        return (order.get(node, len(order)), node, int(dev) if dev.isdigit() else -1)

    labels = sorted({s for s, _ in cells} | {d for _, d in cells}, key=key)
    index = {lab: i for i, lab in enumerate(labels)}
    return {"check": summary.check, "status": summary.status.value, "labels": labels,
            "cells": [[index[s], index[d], v[0], v[1]] for (s, d), v in cells.items()]}


# ------------------------------------------------------------------ page

def _header(report: Report) -> str:
    counts = report.counts()
    states: dict[str, int] = {}
    for n in report.nodes:
        states[n.state.value] = states.get(n.state.value, 0) + 1
    badges = "".join(f'<span class="count st-{s}">{counts[s]} {s}</span>' for s in STATUSES)
    bad_nodes = [n for n in report.nodes if n.state is not NodeStateKind.OK]
    unreached = "".join(f"<li><b>{e(n.name)}</b> ({e(n.host)}): {e(n.state.value)}: {e(n.error or '')}</li>"
                        for n in bad_nodes)
    return (f'<header><h1 id="verdict" class="v-{e(report.verdict)}">{VERDICT[report.verdict]}'
            f' <small>exit {report.exit_code}</small></h1>'
            f'<p class="meta">{e(report.cluster or "")} · {len(report.nodes)} nodes: '
            f'{e(", ".join(f"{v} {k}" for k, v in sorted(states.items())))} · {e(report.started_at)} → '
            f'{e(report.finished_at)} · run <code>{e(report.run_id)}</code> · inventory '
            f'<code>{e(report.inventory_path)}</code> · preflight {e(report.tool_version)}'
            f'{" · <b>interrupted, partial report</b>" if report.interrupted else ""}</p>'
            f'<p id="counts">{badges}</p>'
            + (f'<div class="unreached"><b>Nodes not reached</b><ul>{unreached}</ul></div>' if bad_nodes else "")
            + '</header>')


def _filters(checks: Iterable[str]) -> str:
    boxes = "".join(f'<label class="st-{s}"><input type="checkbox" name="status" value="{s}" checked> {s}</label>'
                    for s in STATUSES)
    opts = "".join(f'<option value="{e(c)}">{e(c)}</option>' for c in checks)
    return (f'<nav id="filters">{boxes} <select id="check-filter"><option value="">every check</option>{opts}'
            f'</select> <input id="node-filter" type="search" placeholder="node name contains…"></nav>')


def _failures(report: Report) -> str:
    rows = []
    shown = [g for g in grouped(report)
             if not (g.status is Status.SKIP or (g.status is Status.PASS and not g.flapping))]
    # the evidence of a line is its first node's results: found in one pass over the results, not
    # one a line (1,000 failing lines x 18,000 results took 7 s)
    lines = {(g.check, g.nodes[0], g.summary) for g in shown}
    evidence: dict[tuple[str, str, str], list[str]] = {}
    for r in report.results:
        key = (r.check, r.node or CLUSTER, r.summary)
        if key in lines:
            evidence.setdefault(key, []).append(_evidence(r.details))
    for g in shown:
        fix = e(g.remediation or "")
        ev = "".join(evidence.get((g.check, g.nodes[0], g.summary), ()))[:EVIDENCE_MAX]
        rows.append(
            f'<tr class="finding st-{g.status.value}{" acked" if g.ack else ""}" data-status="{g.status.value}" data-check="{e(g.check)}" '
            f'data-nodes="{e(" ".join(g.nodes))}"><td class="badge st-{g.status.value}">{g.status.value.upper()}</td>'
            f'<td><code>{e(g.check)}</code></td><td class="nodes">{e(g.label)}</td>'
            f'<td>{e(g.summary)}' + (f'<div class="note">{e(g.note)}</div>' if g.note else "") + (f'<details><summary>evidence</summary><pre>{e(ev)}</pre></details>' if ev else "")
            + f'</td><td>{f"<span class=action>{e(g.action)}</span>" if g.action else ""}</td><td>{fix}</td></tr>')
    body = "".join(rows) or '<tr><td colspan="6">nothing failed, warned or errored</td></tr>'
    return ('<section id="failures"><h2>Failures first</h2><p class="hint">then errors and warnings; '
            'dimmed: acknowledged (preflight ack); passing lines only while flapping; skips in the heat map</p><table class="list"><thead><tr><th>status</th>'
            '<th>check</th><th>nodes</th><th>finding</th><th>action</th><th>fix</th></tr></thead>'
            f'<tbody>{body}</tbody></table></section>')


def _heatmap(checks: list[str], rows) -> str:
    head = "".join(f'<th class="rot"><div>{e(c)}</div></th>' for c in checks)
    body = []
    for i, (nodes, sig) in enumerate(rows):
        cells = "".join(
            f'<td class="cell st-{s}" data-row="{i}" data-col="{j}" data-check="{e(checks[j])}" data-status="{s}" '
            f'title="{e(checks[j])} on {e(fold(nodes))}: {s}">{MARK[s]}</td>' if s else '<td class="cell none"></td>'
            for j, s in enumerate(sig))
        body.append(f'<tr data-nodes="{e(" ".join(nodes))}" data-statuses="{" ".join(sorted({s for s in sig if s}))}">'
                    f'<th class="nodes">{e(fold(nodes))} <small>({len(nodes)})</small></th>{cells}</tr>')
    return ('<section id="heatmap"><h2>Node × check</h2><p class="hint">identical rows folded into node ranges; '
            'click a cell for its findings; grey: no result for that node (a cluster check names only the nodes '
            'it blames)</p><div class="scroll"><table class="heat"><thead><tr><th>nodes</th>'
            f'{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div><div id="panel" hidden></div></section>')


def _meshes(report: Report) -> tuple[str, list[dict[str, Any]]]:
    parts, data = [], []
    for summary, devices in mesh_results(report):
        m = mesh(summary, devices, [n.name for n in report.nodes])
        if m is None:
            continue
        title = f"{'device' if devices else 'node'} mesh ({summary.check})"
        i = len(data)
        data.append(m)
        rtt = "" if devices else (f'<label><input type="radio" name="metric{i}" value="loss" checked> loss</label>'
                                  f'<label><input type="radio" name="metric{i}" value="rtt"> RTT</label>')
        parts.append(f'<div class="mesh" data-mesh="{i}"><h3>{e(title)} <small class="st-{m["status"]}">'
                     f'{m["status"]}</small></h3><p class="hint">{len(m["labels"])} × {len(m["labels"])}, '
                     f'{len(m["cells"])} measured pairs; row = from, column = to; grey: not measured {rtt}</p>'
                     f'<canvas id="mesh{i}" width="10" height="10"></canvas><div class="legend" id="legend{i}"></div>'
                     f'<div class="probe" id="probe{i}">hover a cell</div></div>')
    if not parts:
        return "", data
    return f'<section id="meshes"><h2>Mesh matrices</h2>{"".join(parts)}</section>', data


def render(report: Report) -> str:
    checks, rows = heat_rows(report)
    meshes_html, meshes = _meshes(report)
    data = {"checks": checks, "rows": [fold(n) for n, _ in rows], "cells": _cell_findings(report, checks, rows),
            "meshes": meshes}
    title = f"preflight {report.cluster or ''} {VERDICT[report.verdict]}"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{e(title)}</title>'
            f'<style>{CSS}</style></head><body>{_header(report)}{_filters(checks)}{_failures(report)}'
            f'{_heatmap(checks, rows)}{meshes_html}'
            f'<script type="application/json" id="data">{_script_json(data)}</script><script>{JS}</script>'
            f'</body></html>\n')


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 1.5em 2em;color:#222;background:#fafafa}
h1{margin:.4em 0 0}h1 small{font-size:50%;color:#666}.v-ready{color:#1a7f37}.v-not_ready{color:#c62828}
.v-incomplete{color:#8e24aa}.meta{color:#555;margin:.2em 0}code{font-size:90%}
.count{display:inline-block;padding:.15em .6em;margin-right:.4em;border-radius:1em;color:#fff;font-weight:600}
.st-fail{--c:#d32f2f}.st-error{--c:#8e24aa}.st-warn{--c:#f9a825}.st-pass{--c:#43a047}.st-skip{--c:#9e9e9e}
.count,.badge{background:var(--c)}.badge{color:#fff;font-weight:700;text-align:center;border-radius:3px}
nav{position:sticky;top:0;background:#fafafa;padding:.5em 0;border-bottom:1px solid #ddd;z-index:2}
nav label{margin-right:.8em;border-bottom:3px solid var(--c)}
table.list{border-collapse:collapse;width:100%;background:#fff}
table.list td,table.list th{border-bottom:1px solid #eee;padding:.3em .5em;vertical-align:top;text-align:left}
.nodes{font-family:ui-monospace,monospace}table.list .nodes{min-width:7em;max-width:16em;overflow-wrap:anywhere}
table.list td:nth-child(4){min-width:24em}table.list td:nth-child(6){min-width:18em}
.action{background:#263238;color:#fff;padding:.1em .5em;border-radius:3px;font-family:ui-monospace,monospace}
pre{white-space:pre-wrap;max-height:16em;overflow:auto;background:#f3f3f3;padding:.4em}
.scroll{overflow:auto;max-height:70vh}table.heat{border-collapse:collapse}
table.heat th.nodes{text-align:left;padding-right:.8em;position:sticky;left:0;background:#fafafa;
 min-width:8em;max-width:22em;overflow-wrap:anywhere;font-weight:normal}
th.rot{height:9em;white-space:nowrap;vertical-align:bottom}th.rot div{transform:rotate(-60deg);width:1.6em}
td.cell{width:1.6em;height:1.6em;text-align:center;color:#fff;background:var(--c);border:1px solid #fff;cursor:pointer}
td.cell.none{background:#eee;cursor:default}td.cell.sel{outline:3px solid #000}
#panel{background:#fff;border:1px solid #ccc;padding:.6em;margin-top:.6em}
.mesh{display:inline-block;vertical-align:top;margin:0 2em 1em 0}canvas{image-rendering:pixelated;border:1px solid #ccc}
.legend span{display:inline-block;padding:0 .4em;color:#fff;margin-right:2px}.hint{color:#666;font-size:90%}
.unreached{background:#f3e5f5;padding:.3em .8em}.hidden{display:none}
tr.acked{opacity:.45}.note{color:#8d6e00;font-style:italic}
"""

JS = r"""
(function(){
const D=JSON.parse(document.getElementById('data').textContent);
const $=s=>document.querySelector(s),$$=s=>Array.from(document.querySelectorAll(s));
function txt(tag,t,cls){const e=document.createElement(tag);e.textContent=t;if(cls)e.className=cls;return e;}
function apply(){
  const sts=new Set($$('input[name=status]:checked').map(i=>i.value));
  const chk=$('#check-filter').value,nf=$('#node-filter').value.trim();
  $$('tr.finding').forEach(tr=>{const ok=sts.has(tr.dataset.status)&&(!chk||tr.dataset.check===chk)&&
    (!nf||tr.dataset.nodes.includes(nf));tr.classList.toggle('hidden',!ok);});
  $$('table.heat tbody tr').forEach(tr=>{const any=tr.dataset.statuses.split(' ').some(s=>sts.has(s));
    tr.classList.toggle('hidden',!any||(nf&&!tr.dataset.nodes.includes(nf)));});
  $$('table.heat td.cell[data-check]').forEach(td=>{td.style.opacity=(!chk||td.dataset.check===chk)&&sts.has(td.dataset.status)?1:.15;});
}
$$('#filters input,#filters select').forEach(i=>i.addEventListener('input',apply));
$$('td.cell[data-row]').forEach(td=>td.addEventListener('click',()=>{
  $$('td.cell.sel').forEach(x=>x.classList.remove('sel'));td.classList.add('sel');
  const p=$('#panel');p.hidden=false;p.replaceChildren();
  const r=+td.dataset.row,c=+td.dataset.col;
  p.appendChild(txt('h3',D.checks[c]+' on '+D.rows[r]));
  for(const [st,sum,act,fix,nodes,ev] of D.cells[r][c]){
    const d=document.createElement('div');d.className='st-'+st;
    d.appendChild(txt('span',st.toUpperCase(),'badge st-'+st));d.appendChild(txt('b',' '+nodes+': '));
    d.appendChild(txt('span',sum));
    if(act){d.appendChild(document.createElement('br'));d.appendChild(txt('span',act,'action'));}
    if(fix){d.appendChild(txt('div','fix: '+fix));}
    if(ev){d.appendChild(txt('pre',ev));}
    p.appendChild(d);}
}));
function lossColor(v){if(v===null||v===undefined)return '#bbb';if(v<=0)return '#43a047';if(v<100)return 'rgb(249,'+Math.round(168-120*v/100)+',37)';return '#d32f2f';}
function rttColor(v,max){if(v===null||v===undefined)return '#bbb';const f=Math.min(1,v/max);return 'rgb('+Math.round(67+170*f)+','+Math.round(160-110*f)+',71)';}
D.meshes.forEach((m,i)=>{
  const n=m.labels.length,cv=$('#mesh'+i),px=Math.max(2,Math.min(12,Math.floor(640/n)));
  cv.width=n*px;cv.height=n*px;const ctx=cv.getContext('2d');
  const grid=new Map();m.cells.forEach(c=>grid.set(c[0]*n+c[1],c));
  const rtts=m.cells.map(c=>c[3]).filter(v=>v!==null);const max=Math.max(1,...rtts);
  function draw(metric){ctx.fillStyle='#eee';ctx.fillRect(0,0,cv.width,cv.height);
    m.cells.forEach(c=>{ctx.fillStyle=metric==='rtt'?rttColor(c[3],max):lossColor(c[2]);ctx.fillRect(c[1]*px,c[0]*px,px,px);});
    const lg=$('#legend'+i);lg.replaceChildren();
    (metric==='rtt'?[['0 ms',rttColor(0,max)],[max.toFixed(2)+' ms',rttColor(max,max)]]:
      [['0% loss','#43a047'],['partial loss',lossColor(50)],['100% loss','#d32f2f'],['not measured','#bbb']])
      .forEach(([t,c])=>{const s=txt('span',t);s.style.background=c;lg.appendChild(s);});}
  draw('loss');
  $$('input[name=metric'+i+']').forEach(r=>r.addEventListener('change',()=>draw(r.value)));
  cv.addEventListener('mousemove',ev=>{const b=cv.getBoundingClientRect();
    const col=Math.floor((ev.clientX-b.left)/b.width*n),row=Math.floor((ev.clientY-b.top)/b.height*n);
    const c=grid.get(row*n+col);$('#probe'+i).textContent=(m.labels[row]||'')+' → '+(m.labels[col]||'')+': '+
      (c?('loss '+c[2]+'%'+(c[3]!==null?', rtt '+c[3]+' ms':'')):'not measured');});
});
// a link can carry the view: #status=fail,error&check=hccn.link&node=node01&cell=ROW,COL
const h=new URLSearchParams(location.hash.slice(1));
if(h.has('status')){const want=h.get('status').split(',');$$('input[name=status]').forEach(i=>i.checked=want.includes(i.value));}
if(h.has('check'))$('#check-filter').value=h.get('check');
if(h.has('node'))$('#node-filter').value=h.get('node');
apply();
if(h.has('cell')){const [r,c]=h.get('cell').split(',');const td=$('td.cell[data-row="'+r+'"][data-col="'+c+'"]');if(td)td.click();}
document.body.dataset.rendered='yes';
})();
"""


def script_hash(text: str) -> str:
    """A CSP source for one inline script: the sha256 of its exact text between the tags (CSP 3)."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# The page's one script may run, and nothing else: an injected <script> (had escaping failed) or an
# event-handler attribute is refused by the browser. The JSON data block is not a script it runs.
CSP = CSP_FORMAT.format(scripts=script_hash(JS))
