"""The self-contained HTML page: the graph as JSON, ELK and the page script inlined (no network)."""
from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any, Mapping

_CSS = """
body{margin:0;font:13px system-ui,sans-serif;display:flex;height:100vh;overflow:hidden}
#side{width:330px;padding:8px;overflow:auto;border-right:1px solid #ccc;box-sizing:border-box;
overflow-wrap:break-word}
#canvas{flex:1;height:100vh;cursor:grab;background:#fafafa}
h1{font-size:15px;margin:4px 0}.note{color:#555;font-size:12px}
#legend,#results{list-style:none;padding:0;margin:4px 0}#legend li,#results li{cursor:pointer;padding:1px 0}
#results li:hover,#legend li:hover{background:#eef}
.sw{display:inline-block;width:12px;height:12px;margin-right:5px;border:1px solid #666;vertical-align:middle}
#info table{border-collapse:collapse;font-size:12px;table-layout:fixed;width:100%}
#info th{text-align:left;padding-right:6px;vertical-align:top;width:78px}input{width:95%}
.edge{fill:none;stroke:#888;stroke-width:1}.edge.cut{stroke:#d40000;stroke-width:2.5;stroke-dasharray:6 3}
.node rect{stroke:#444;stroke-width:.8}.node text{text-anchor:middle;font-size:11px;pointer-events:none}
.node text.small{font-size:10px}.n-removed{stroke-dasharray:3 2}.node.hit rect{stroke:#000;stroke-width:3}
.node:hover rect{stroke-width:2}.box{stroke-width:2!important}
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{css}</style></head>
<body><div id="side"><h1>{title}</h1>
<p class="note">{summary}</p>
<p class="note">Colour = stage (each accelerator subgraph its own shade, CPU grey, white =
removed by canonicalization); <span style="color:#d40000">red dashed edges</span> cross a stage
boundary. Hover or click a node for its op, name, rule or reason, Mrvl layer and shapes; click a
stage below to collapse or expand it; scroll to zoom, drag to pan.{estimate_note}</p>
<button id="fit" title="the whole graph, however small">fit</button>
<button id="collapse-all">collapse all</button> <button id="expand-all">expand all</button>
<p><input id="search" placeholder="search node name"></p><ul id="results"></ul>
<div id="info"></div><h1>Stages</h1><ul id="legend"></ul><p id="status" class="note"></p></div>
<svg id="canvas" xmlns="http://www.w3.org/2000/svg"><defs>
<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L10,5L0,10z" fill="#888"/></marker>
<marker id="arrow-cut" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="5" markerHeight="5" orient="auto"><path d="M0,0L10,5L0,10z" fill="#d40000"/></marker>
</defs><g id="view"></g></svg>
<script type="application/json" id="graph-data">{data}</script>
<script>{elk}</script>
<script>{page}</script>
</body></html>
"""


def _asset(name: str) -> str:
    return resources.files("mrvl_convert.viz").joinpath(name).read_text(encoding="utf-8")


# JSON inside <script> is HTML script data: "</script" ends the element, "<!--" followed by
# "<script" keeps it open past its "</script>". Outside strings JSON has none of these characters;
# inside them each becomes its \u escape, which JSON.parse reads back as the same character.
_SCRIPT_DATA_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                      "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _script_data(document: Any) -> str:
    """``document`` as JSON that can sit inside an HTML ``<script>`` element unchanged."""
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=True, sort_keys=True)
    return text.translate(_SCRIPT_DATA_ESCAPES)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def render_page(description: Mapping[str, Any]) -> str:
    """The HTML page for a graph description (``viz.graph.describe``)."""
    s = description["summary"]
    summary = (f"{_count(s['nodes'], 'node')}: {s['mrvl_nodes']} on the accelerator in "
               f"{_count(s['mrvl_subgraphs'], 'subgraph')}, {s['cpu_nodes']} on CPU in "
               f"{_count(s['cpu_subgraphs'], 'subgraph')}, {s['removed_nodes']} removed "
               f"({_count(description['hidden_constant_nodes'], 'constant-only node')} not drawn).")
    estimated = any(st.get("estimated_us") is not None for st in description["stages"])
    note = (" Times are an ESTIMATE of the accelerator (docs/ESTIMATE.md), not a measurement."
            if estimated else "")
    return _TEMPLATE.format(title=html.escape(f"{description['model']}: partition"),
                            css=_CSS, summary=html.escape(summary), estimate_note=note,
                            data=_script_data(description), elk=_asset("elk.bundled.js"),
                            page=_asset("page.js"))
