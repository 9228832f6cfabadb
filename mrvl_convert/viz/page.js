// mrvl_convert partition page: lays the graph out with ELK (inlined), draws it as SVG.
(function () {
  "use strict";
  const G = JSON.parse(document.getElementById("graph-data").textContent);
  const svgNS = "http://www.w3.org/2000/svg";
  const svg = document.getElementById("canvas"), view = document.getElementById("view");
  const status = document.getElementById("status"), info = document.getElementById("info");
  const stageIndex = {}, colour = {};
  let mrvlCount = 0;
  G.stages.forEach((s, i) => {
    stageIndex[s.name] = i;
    if (s.kind === "mrvl") {   // each Mrvl subgraph its own shade; CPU grey
      const hue = (200 + 137.508 * mrvlCount++) % 360;
      colour[s.name] = `hsl(${hue.toFixed(1)},65%,62%)`;
    } else colour[s.name] = "#b8b8b8";
  });
  const collapsed = new Set();
  // Big graphs open with every stage collapsed (one box each); "#expand" in the address opens
  // them expanded.
  // "#collapse" opens every graph collapsed.
  if ((G.nodes.length > 1200 && location.hash !== "#expand") || location.hash === "#collapse")
    G.stages.forEach(s => collapsed.add(s.name));
  const esc = t => String(t).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  const shp = s => s ? "[" + s.join(",") + "]" : "?";
  const fill = n => n.stage ? colour[n.stage] : (n.placement === "io" ? "#fff7d6" : "#ffffff");

  function visibleGraph() {
    const boxes = {}, children = [], edges = [], seen = new Set();
    const key = n => (n.stage && collapsed.has(n.stage)) ? "s" + stageIndex[n.stage] : "n" + n.id;
    G.nodes.forEach(n => {
      const k = key(n);
      if (k[0] === "s") {
        if (!boxes[k]) { const s = G.stages[stageIndex[n.stage]];
          boxes[k] = {id: k, stage: s.name, width: Math.max(150, s.name.length * 7.2 + 20), height: 40};
          children.push(boxes[k]); }
      } else children.push({id: k, node: n, width: Math.max(60, n.op.length * 7.5 + 16), height: 26});
    });
    G.edges.forEach(([a, b, t], i) => {
      const ka = key(G.nodes[a]), kb = key(G.nodes[b]);
      if (ka === kb || seen.has(ka + ">" + kb)) return;
      seen.add(ka + ">" + kb);
      const sa = G.nodes[a].stage, sb = G.nodes[b].stage;
      edges.push({id: "e" + i, sources: [ka], targets: [kb], tensor: t, cut: !!(sa && sb && sa !== sb)});
    });
    return {id: "root", children, edges, layoutOptions: {
      "elk.algorithm": "layered", "elk.direction": "DOWN", "elk.edgeRouting": "POLYLINE",
      "elk.layered.spacing.nodeNodeBetweenLayers": "18", "elk.spacing.nodeNode": "12",
      "elk.layered.nodePlacement.strategy": "LINEAR_SEGMENTS"}};
  }

  function el(tag, attrs, parent) {
    const e = document.createElementNS(svgNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function render(g) {
    view.textContent = "";
    const edgeLayer = el("g", {}, view), nodeLayer = el("g", {}, view);
    g.edges.forEach(e => (e.sections || []).forEach(s => {
      const pts = [s.startPoint, ...(s.bendPoints || []), s.endPoint];
      el("path", {d: "M" + pts.map(p => p.x.toFixed(1) + "," + p.y.toFixed(1)).join("L"),
        class: e.cut ? "edge cut" : "edge", "marker-end": e.cut ? "url(#arrow-cut)" : "url(#arrow)"}, edgeLayer)
        .appendChild(document.createElementNS(svgNS, "title")).textContent =
          (e.cut ? "stage boundary: " : "") + e.tensor;
    }));
    g.children.forEach(c => {
      const grp = el("g", {transform: `translate(${c.x},${c.y})`, class: "node", "data-id": c.id}, nodeLayer);
      if (c.stage) {
        const s = G.stages[stageIndex[c.stage]];
        el("rect", {width: c.width, height: c.height, rx: 8, fill: colour[s.name], class: "box"}, grp);
        el("text", {x: c.width / 2, y: 16}, grp).textContent = s.name;
        el("text", {x: c.width / 2, y: 32, class: "small"}, grp).textContent =
          `${s.nodes} nodes` + (s.estimated_us != null ? `, est. ${s.estimated_us.toFixed(1)} us` : "");
        grp.addEventListener("click", () => { collapsed.delete(s.name); layout(); });
      } else {
        const n = c.node;
        el("rect", {width: c.width, height: c.height, rx: 4, fill: fill(n),
          class: "n-" + n.placement}, grp);
        el("text", {x: c.width / 2, y: 17}, grp).textContent = n.op;
        grp.addEventListener("mouseenter", () => show(n));
        grp.addEventListener("click", ev => { show(n, true); ev.stopPropagation(); });
        c.node.el = grp;
      }
    });
    svg.dataset.width = g.width; svg.dataset.height = g.height;
  }

  let pinned = false;
  function show(n, pin) {
    if (pinned && !pin) return;
    pinned = !!pin;
    const row = (k, v) => v == null ? "" : `<tr><th>${k}</th><td>${esc(v)}</td></tr>`;
    info.innerHTML = `<table>${row("op", n.op)}${row("name", n.name)}${row("placement", n.placement)}` +
      row("stage", n.stage) + row("rule", n.rule) + row("reason", n.reason) + row("Mrvl layer", n.layer) +
      (n.inputs || []).map(([t, s]) => row("in", t + " " + shp(s))).join("") +
      (n.outputs || []).map(([t, s]) => row("out", t + " " + shp(s))).join("") + "</table>" +
      (n.stage ? `<button id="collapse-this">collapse ${esc(n.stage)}</button>` : "");
    const b = document.getElementById("collapse-this");
    if (b) b.onclick = () => { collapsed.add(n.stage); pinned = false; layout(); };
  }

  // pan and zoom: one transform on the <g id="view">
  let T = {x: 10, y: 10, k: 1};
  const apply = () => view.setAttribute("transform", `translate(${T.x},${T.y}) scale(${T.k})`);
  svg.addEventListener("wheel", ev => {
    ev.preventDefault();
    const f = Math.exp(-ev.deltaY * 0.0015), r = svg.getBoundingClientRect();
    const mx = ev.clientX - r.left, my = ev.clientY - r.top;
    T = {k: T.k * f, x: mx - (mx - T.x) * f, y: my - (my - T.y) * f}; apply();
  }, {passive: false});
  svg.addEventListener("click", () => { pinned = false; });   // a click on the background unpins
  let drag = null;
  svg.addEventListener("mousedown", ev => { drag = {x: ev.clientX - T.x, y: ev.clientY - T.y}; });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("mousemove", ev => { if (drag) { T.x = ev.clientX - drag.x; T.y = ev.clientY - drag.y; apply(); } });
  function fit() {
    const r = svg.getBoundingClientRect(), w = +svg.dataset.width || 1, h = +svg.dataset.height || 1;
    const k = Math.min(r.width / w, r.height / h) * 0.95;
    T = {k, x: (r.width - w * k) / 2, y: 10}; apply();
  }
  function focusNode(n) {
    if (n.stage && collapsed.has(n.stage)) { collapsed.delete(n.stage); return layout().then(() => focusNode(n)); }
    if (!n.el) return;
    const m = /translate\(([-\d.e]+),([-\d.e]+)\)/.exec(n.el.getAttribute("transform"));
    const r = svg.getBoundingClientRect();
    T = {k: 1.2, x: r.width / 2 - (+m[1]) * 1.2, y: r.height / 2 - (+m[2]) * 1.2}; apply();
    document.querySelectorAll(".hit").forEach(e => e.classList.remove("hit"));
    n.el.classList.add("hit"); show(n, true);
  }
  function home() {   // readable scale from the top: a deep model is taller than any screen
    const r = svg.getBoundingClientRect(), w = +svg.dataset.width || 1;
    const k = Math.min(1, r.width * 0.95 / w);
    T = {k, x: (r.width - w * k) / 2, y: 10}; apply();
  }
  document.getElementById("fit").onclick = fit;
  document.getElementById("collapse-all").onclick = () => { G.stages.forEach(s => collapsed.add(s.name)); layout(); };
  document.getElementById("expand-all").onclick = () => { collapsed.clear(); layout(); };
  const search = document.getElementById("search"), results = document.getElementById("results");
  search.addEventListener("input", () => {
    const q = search.value.trim().toLowerCase();
    results.textContent = "";
    if (!q) return;
    G.nodes.filter(n => n.name.toLowerCase().includes(q)).slice(0, 50).forEach(n => {
      const li = document.createElement("li");
      li.textContent = `${n.name} (${n.op})`;
      li.onclick = () => focusNode(n);
      results.appendChild(li);
    });
  });

  const legend = document.getElementById("legend");
  G.stages.forEach(s => {
    const li = document.createElement("li");
    li.innerHTML = `<span class="sw" style="background:${colour[s.name]}"></span>${esc(s.name)} ` +
      `<small>${s.nodes} nodes${s.estimated_us != null ? ", est. " + s.estimated_us.toFixed(1) + " us" : ""}</small>`;
    li.title = "click: collapse or expand this stage";
    li.onclick = () => { collapsed.has(s.name) ? collapsed.delete(s.name) : collapsed.add(s.name); layout(); };
    legend.appendChild(li);
  });

  const elk = new ELK();
  function layout() {
    const t0 = performance.now();
    status.textContent = "laying out...";
    G.nodes.forEach(n => { n.el = null; });
    return elk.layout(visibleGraph()).then(g => {
      render(g); home();
      const ms = Math.round(performance.now() - t0);
      document.body.dataset.layoutMs = ms;
      document.body.dataset.drawn = g.children.length;
      status.textContent = `${g.children.length} boxes laid out in ${ms} ms`;
      const want = decodeURIComponent(location.hash.replace(/^#node=/, ""));
      const hit = location.hash.startsWith("#node=") && G.nodes.find(n => n.name === want);
      if (hit && !hit.el) return focusNode(hit);   // inside a collapsed stage: expand, then focus
      if (hit) focusNode(hit);
    }).catch(err => { status.textContent = "layout failed: " + err; });
  }
  layout();
})();
