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
  // The address can ask for a view: "#collapse" or "?collapse=1" (every stage one box), "#expand",
  // "#node=NAME" (that node pinned), "?search=TEXT" (as if typed into the search box). Big graphs
  // open collapsed.
  const query = new URLSearchParams(location.search), hash = location.hash;
  if ((G.nodes.length > 1200 && hash !== "#expand") || hash === "#collapse" || query.get("collapse") === "1")
    G.stages.forEach(s => collapsed.add(s.name));
  // The smallest zoom that opens a page: an 11px label is then 9px on screen.
  const READABLE = 9 / 11;
  // ELK's graph wrapping costs grow faster than the graph: bigger graphs stay one column.
  const WRAP_MAX = 800;
  const esc = t => String(t).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  // Names wrap after "_" "/" "." "," ":" rather than mid-word.
  const wrap = t => esc(t).replace(/([_/.,:])/g, "$1<wbr>");
  const count = (n, one, many = one + "s") => `${n} ${n === 1 ? one : many}`;
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
    const graph = {id: "root", children, edges, layoutOptions: {
      "elk.algorithm": "layered", "elk.direction": "DOWN", "elk.edgeRouting": "POLYLINE",
      "elk.layered.spacing.nodeNodeBetweenLayers": "18", "elk.spacing.nodeNode": "12",
      "elk.layered.nodePlacement.strategy": "LINEAR_SEGMENTS"}};
    const layer = Math.max(...children.map(c => c.height)) + 18;
    if (children.length <= WRAP_MAX && depth(graph) * layer * READABLE > svg.getBoundingClientRect().height)
      Object.assign(graph.layoutOptions, {"elk.layered.wrapping.strategy": "MULTI_EDGE",
                                          "elk.aspectRatio": String(wrapAspect(children))});
    return graph;
  }

  function depth(g) {   // boxes on the longest path: the drawing's height in layers unwrapped
    const next = {}, into = {}, level = {};
    g.children.forEach(c => { next[c.id] = []; into[c.id] = 0; level[c.id] = 1; });
    g.edges.forEach(e => { next[e.sources[0]].push(e.targets[0]); into[e.targets[0]]++; });
    const todo = g.children.map(c => c.id).filter(id => !into[id]);
    let deepest = 0;
    while (todo.length) {
      const id = todo.pop();
      deepest = Math.max(deepest, level[id]);
      next[id].forEach(t => { level[t] = Math.max(level[t], level[id] + 1); if (!--into[t]) todo.push(t); });
    }
    return deepest;
  }

  // A network is a long thin column: ELK cuts it into columns side by side (graph wrapping). The
  // aspect ratio asked for is the window's if the whole graph fits at a readable zoom, else that
  // of a drawing as wide as the window at that zoom (it then continues below).
  function wrapAspect(children) {
    const r = svg.getBoundingClientRect(), shape = r.width / Math.max(r.height, 1);
    // Boxes with their spacing cover about 40% of ELK's drawing.
    const area = children.reduce((a, c) => a + (c.width + 12) * (c.height + 18), 0) * 2.5;
    const width = r.width * 0.8 / READABLE;   // ELK overshoots the width it is asked for
    return Math.max(0.01, Math.min(shape, width * width / area));
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
          count(s.nodes, "node") + (s.estimated_us != null ? `, est. ${s.estimated_us.toFixed(1)} us` : "");
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
    const row = (k, v) => v == null ? "" : `<tr><th>${k}</th><td>${wrap(v)}</td></tr>`;
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
    document.body.dataset.focused = n.name;
  }
  function home() {   // the whole graph if its labels stay readable, else its full width from the top
    const r = svg.getBoundingClientRect(), w = +svg.dataset.width || 1, h = +svg.dataset.height || 1;
    const all = Math.min(r.width / w, r.height / h) * 0.95;
    const k = all >= READABLE ? Math.min(1, all) : Math.max(READABLE, Math.min(1, r.width * 0.95 / w));
    T = {k, x: Math.max(10, (r.width - w * k) / 2), y: 10}; apply();
  }
  document.getElementById("fit").onclick = fit;
  document.getElementById("collapse-all").onclick = () => { G.stages.forEach(s => collapsed.add(s.name)); layout(); };
  document.getElementById("expand-all").onclick = () => { collapsed.clear(); layout(); };
  const search = document.getElementById("search"), results = document.getElementById("results");
  function matches(text) {   // an exact name first
    const q = text.trim().toLowerCase();
    if (!q) return [];
    const found = G.nodes.filter(n => n.name.toLowerCase().includes(q));
    return found.filter(n => n.name.toLowerCase() === q).concat(found.filter(n => n.name.toLowerCase() !== q));
  }
  search.addEventListener("input", () => {
    results.textContent = "";
    matches(search.value).slice(0, 50).forEach(n => {
      const li = document.createElement("li");
      li.innerHTML = `${wrap(n.name)} (${esc(n.op)})`;
      li.onclick = () => focusNode(n);
      results.appendChild(li);
    });
  });

  const legend = document.getElementById("legend");
  G.stages.forEach(s => {
    const li = document.createElement("li");
    li.innerHTML = `<span class="sw" style="background:${colour[s.name]}"></span>${wrap(s.name)} ` +
      `<small>${count(s.nodes, "node")}${s.estimated_us != null ? ", est. " + s.estimated_us.toFixed(1) + " us" : ""}</small>`;
    li.title = "click: collapse or expand this stage";
    li.onclick = () => { collapsed.has(s.name) ? collapsed.delete(s.name) : collapsed.add(s.name); layout(); };
    legend.appendChild(li);
  });

  // What the page shows, in data- attributes of <body> (read by tests and benchmarks).
  function record(g, ms) {
    const d = document.body.dataset, r = svg.getBoundingClientRect(), seen = new Set();
    g.children.forEach(c => {
      const x = T.x + c.x * T.k, y = T.y + c.y * T.k;
      if (x < r.width && y < r.height && x + c.width * T.k > 0 && y + c.height * T.k > 0)
        seen.add(c.stage || (c.node && c.node.stage));
    });
    d.layoutMs = ms; d.drawn = g.children.length; d.scale = T.k.toFixed(3);
    d.stageBoxes = g.children.filter(c => c.stage).length;
    d.stagesInView = G.stages.filter(s => seen.has(s.name)).length;
  }

  const elk = new ELK();
  let opened = false;   // "ready" waits for what the address asks for (opening)
  function layout() {
    const t0 = performance.now();
    status.textContent = "laying out...";
    document.body.dataset.state = "layout";
    G.nodes.forEach(n => { n.el = null; });
    return elk.layout(visibleGraph()).then(g => {
      render(g); home();
      const ms = Math.round(performance.now() - t0);
      record(g, ms);
      status.textContent = `${count(g.children.length, "box", "boxes")} laid out in ${ms} ms`;
      if (opened) document.body.dataset.state = "ready";
      return true;
    }).catch(err => {
      status.textContent = "layout failed: " + err; document.body.dataset.state = "failed"; return false;
    });
  }

  function opening() {   // what the address asks for, once the first layout is done
    if (query.has("search")) {
      search.value = query.get("search");
      search.dispatchEvent(new Event("input"));
      const found = matches(search.value);
      document.body.dataset.found = found.length;
      if (found.length) return focusNode(found[0]);
    }
    const want = decodeURIComponent(hash.replace(/^#node=/, ""));
    const hit = hash.startsWith("#node=") && G.nodes.find(n => n.name === want);
    if (hit) return focusNode(hit);   // inside a collapsed stage: expands it first
  }
  layout().then(ok => ok && opening()).then(() => {
    opened = true;
    if (document.body.dataset.state !== "failed") document.body.dataset.state = "ready";
  });
})();
