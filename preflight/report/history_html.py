"""`preflight history --html`: the last N runs as a node x run grid, one self-contained page.

Same rules as the run page (preflight/report/html.py, whose style it shares): inline CSS, no
script needed, a CSP that forbids every fetch, node text escaped. Nodes with the same status in
every run fold into one node range; a cell's title lists what failed there.
"""
from __future__ import annotations

import html

from ..nodeset import fold
from ..ops.memory import Grid
from .html import CSP, CSS, MARK

e = html.escape


def render(grid: Grid) -> str:
    head = "".join(f'<th class="rot" title="{e(fin)} {e(verdict)}"><div>#{rid} {e(fin[5:16])}</div></th>'
                   for rid, fin, verdict in grid.runs)
    buckets: dict[tuple, list[str]] = {}
    for n in grid.nodes:
        sig = tuple((grid.cells.get((n, rid)) or ("", []))[0] for rid, _, _ in grid.runs)
        buckets.setdefault(sig, []).append(n)
    rank = {"fail": 4, "error": 3, "warn": 2, "pass": 1, "skip": 0, "": -1}
    rows = sorted(buckets.items(), key=lambda kv: (-sum(rank[s] >= 3 for s in kv[0]), grid.nodes.index(kv[1][0])))
    body = []
    for sig, nodes in rows:
        cells = []
        for (rid, _, _), st in zip(grid.runs, sig):
            if not st:
                cells.append('<td class="cell none" title="not in this run"></td>')
                continue
            what = sorted({w for n in nodes for w in (grid.cells.get((n, rid)) or ("", []))[1]})
            cells.append(f'<td class="cell st-{st}" data-run="{rid}" data-status="{st}" '
                         f'title="run {rid}: {e("; ".join(what) or st)}">{MARK.get(st, "")}</td>')
        body.append(f'<tr data-nodes="{e(" ".join(nodes))}"><th class="nodes">{e(fold(nodes))} '
                    f'<small>({len(nodes)})</small></th>{"".join(cells)}</tr>')
    table = (f'<table class="heat"><thead><tr><th>nodes</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
             if grid.runs else "<p>no runs stored yet</p>")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}"><title>preflight history</title>'
            f'<style>{CSS}</style></head><body><header><h1>History: {len(grid.runs)} runs × {len(grid.nodes)} nodes</h1>'
            f'<p class="hint">worst status of each node in each run, oldest run first; identical rows folded; '
            f'hover a cell for what failed</p></header><section id="grid"><div class="scroll">{table}</div></section>'
            f'</body></html>\n')
