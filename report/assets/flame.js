// mlprof HTML report: the flame graph section (data.flame, built in report/html_flame.cpp).
//
// A tree is columnar: parent[i], frame[i], values[metric][i] (inclusive; null when the metric is
// zero in this tree). Views: flame (root at the bottom), icicle (root at the top) and inverted
// (leaf functions at the root: who spends the time itself, expanded into its callers). Drawn on
// one <canvas>: only boxes at least ~0.3 px wide are laid out, so a 100,000-node tree costs what
// is visible. Click a box to zoom, Escape or "Reset zoom" to zoom out; search highlights matches
// and says what share of the total they cover. The canvas carries data-drawn (boxes drawn) and
// data-matched (boxes matched) for the browser tests.
(function () {
  "use strict";
  const M = window.MLPROF;
  const ROW = 18;
  const MAX_DEPTH = 1500;

  function render(host, data) {
    const F = data.flame;
    const frames = F.frames;
    const trees = F.trees;
    const state = { tree: 0, metric: -1, view: "flame", zoom: 0, query: "", highlight: null };
    const cache = {}; // per tree index: prepared trees {normal, inverted}

    // ---- tree preparation ----
    function prepare(t) {
      const n = t.parent.length;
      const children = new Array(n);
      for (let i = 0; i < n; i++) children[i] = [];
      for (let i = 1; i < n; i++) children[t.parent[i]].push(i);
      const rare = {};
      (t.rare || []).forEach(function (r) { rare[r[0]] = r[1]; });
      return { parent: t.parent, frame: t.frame, values: t.values, children: children, rare: rare, sorted: {}, n: n };
    }
    // Inverted: for each node with self value, the path node -> root becomes root -> node's callers.
    function invert(T) {
      const nm = T.values.length;
      const parent = [-1], frame = [-1], rareStacks = [0];
      const values = T.values.map(function (v) { return v ? [0] : null; });
      const index = new Map();
      for (let i = 1; i < T.n; i++) {
        const self = new Array(nm);
        let any = false;
        for (let m = 0; m < nm; m++) {
          const V = T.values[m];
          if (!V) continue;
          let s = V[i];
          const ch = T.children[i];
          for (let k = 0; k < ch.length; k++) s -= V[ch[k]];
          self[m] = s;
          if (s > 0) any = true;
        }
        if (!any) continue;
        let node = 0;
        for (let j = i; j > 0; j = T.parent[j]) {
          const key = node * 4194304 + (T.frame[j] + 1);
          let c = index.get(key);
          if (c === undefined) {
            c = parent.length;
            index.set(key, c);
            parent.push(node);
            frame.push(T.frame[j]);
            rareStacks.push(0);
            for (let m = 0; m < nm; m++) if (values[m]) values[m].push(0);
          }
          if (T.frame[j] < 0) rareStacks[c] += T.rare[j] || 0;
          for (let m = 0; m < nm; m++) if (values[m] && self[m] > 0) { values[m][c] += self[m]; if (node === 0) values[m][0] += self[m]; }
          node = c;
        }
      }
      const rare = [];
      rareStacks.forEach(function (s, i) { if (frame[i] < 0 && i > 0) rare.push([i, s]); });
      return prepare({ parent: parent, frame: frame, values: values, rare: rare });
    }
    function current() {
      const c = (cache[state.tree] = cache[state.tree] || { normal: prepare(trees[state.tree]) });
      if (state.view === "inverted") return (c.inverted = c.inverted || invert(c.normal));
      return c.normal;
    }
    function sortedChildren(T, m, i) {
      const s = (T.sorted[m] = T.sorted[m] || {});
      if (!s[i]) {
        const V = T.values[m];
        s[i] = T.children[i].slice().sort(function (a, b) { return V[b] - V[a]; });
      }
      return s[i];
    }
    function metricsOf(t) {
      return M.metrics.filter(function (m) { return t.values[m.index]; });
    }

    // ---- names, colours ----
    function nodeName(T, i, total) {
      if (i === 0) return state.view === "inverted" ? "all (inverted: functions that spend it themselves)" : "all";
      const f = T.frame[i];
      if (f < 0) {
        const v = T.values[state.metric][i];
        return "[" + (T.rare[i] || 0) + " rare stacks: " + M.fmt.percent(v, total) + "]";
      }
      return frames.name[f];
    }
    function hash(s) {
      let h = 0;
      for (let k = 0; k < s.length; k++) h = (h * 31 + s.charCodeAt(k)) | 0;
      return Math.abs(h);
    }
    function colour(T, i, matched, dimmed) {
      if (matched) return "#d6338a";
      const f = T.frame[i];
      if (i === 0 || f < 0) return dimmed ? "#e6e6e6" : "#b8bcc4";
      const kind = M.kinds[frames.kind[f]] || M.kinds[3];
      const h = hash(frames.name[f]);
      if (dimmed) return "hsl(" + kind.hue + ", 10%, 88%)";
      if (kind.grey) return "hsl(0, 0%, " + (70 + (h % 12)) + "%)";
      return "hsl(" + (kind.hue + (h % 16) - 8) + ", " + (55 + (h % 20)) + "%, " + (62 + (h % 14)) + "%)";
    }

    // ---- matching ----
    let matchFrame = null; // Uint8Array over frames, or null
    function computeMatches() {
      matchFrame = null;
      if (state.highlight) {
        matchFrame = new Uint8Array(frames.name.length);
        for (let f = 0; f < frames.name.length; f++) matchFrame[f] = state.highlight.pred(f) ? 1 : 0;
      } else if (state.query) {
        const q = state.query.toLowerCase();
        matchFrame = new Uint8Array(frames.name.length);
        for (let f = 0; f < frames.name.length; f++)
          matchFrame[f] = frames.name[f].toLowerCase().indexOf(q) >= 0 || frames.file[f].toLowerCase().indexOf(q) >= 0 ? 1 : 0;
      }
    }
    function matchStats(T) {
      if (!matchFrame) return null;
      const V = T.values[state.metric];
      const under = new Uint8Array(T.n);
      let count = 0, value = 0;
      for (let i = 1; i < T.n; i++) {
        const f = T.frame[i];
        const m = f >= 0 && matchFrame[f];
        if (m) {
          count += 1;
          if (!under[T.parent[i]]) value += V[i];
        }
        under[i] = under[T.parent[i]] || m ? 1 : 0;
      }
      return { count: count, value: value, total: V[0] };
    }

    // ---- DOM ----
    const controls = M.el("div", { cls: "controls" });
    const canvasWrap = M.el("div", { cls: "flame-wrap" });
    const canvas = M.el("canvas", { cls: "flame", attrs: { tabindex: "0", role: "img", "aria-label": "Flame graph" } });
    const tip = M.el("div", { cls: "tooltip", attrs: { role: "status" } });
    tip.hidden = true;
    canvasWrap.appendChild(canvas);
    canvasWrap.appendChild(tip);
    const status = M.el("div", { cls: "flame-status", attrs: { "aria-live": "polite" } });
    const notes = M.el("div", { cls: "note" });
    const legend = M.el("div", { cls: "legend" });
    M.kinds.forEach(function (k, i) {
      if (i === 3) return;
      const sw = M.el("span", { cls: "swatch" });
      sw.style.background = "hsl(" + k.hue + ", 65%, 66%)";
      legend.appendChild(M.el("span", { cls: "legend-item" }, [sw, M.el("span", { text: k.name })]));
    });
    host.appendChild(controls);
    host.appendChild(status);
    host.appendChild(canvasWrap);
    host.appendChild(legend);
    host.appendChild(notes);

    const search = M.el("input", { attrs: { type: "search", id: "flame-search", placeholder: "Search functions and files", "aria-label": "Search the flame graph" } });
    const matchText = M.el("span", { cls: "match", attrs: { id: "flame-match" } });
    let searchTimer = 0;
    search.addEventListener("input", function () {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(function () {
        state.highlight = null;
        state.query = search.value.trim();
        computeMatches();
        draw();
      }, 120);
    });

    function buildControls() {
      const t = trees[state.tree];
      const ms = metricsOf(t);
      if (!ms.some(function (m) { return m.index === state.metric; })) {
        const def = data.default_metric;
        state.metric = ms.some(function (m) { return m.index === def; }) ? def : ms.length ? ms[0].index : -1;
      }
      const parts = [];
      if (trees.length > 1) {
        parts.push(M.select("flame-tree", "Threads", trees.map(function (tr, i) { return { value: i, text: tr.label }; }), state.tree,
          function (v) { state.tree = Number(v); state.zoom = 0; buildControls(); computeMatches(); draw(); }));
      }
      parts.push(M.select("flame-metric", "Metric", ms.map(function (m) {
        return { value: m.index, text: M.metricLabel(m) };
      }), state.metric, function (v) { state.metric = Number(v); state.zoom = 0; draw(); }));
      parts.push(M.select("flame-view", "View", [
        { value: "flame", text: "flame graph (root at the bottom)" },
        { value: "icicle", text: "icicle (root at the top)" },
        { value: "inverted", text: "inverted (leaf functions at the root)" },
      ], state.view, function (v) { state.view = v; state.zoom = 0; draw(); }));
      parts.push(M.el("span", { cls: "control" }, [search, matchText]));
      parts.push(M.button("Reset zoom", function () { state.zoom = 0; draw(); }));
      controls.replaceChildren.apply(controls, parts);
      const tr = trees[state.tree];
      const notesText = [];
      if (tr.trimmed && tr.trimmed.nodes > 0) {
        const m = state.metric >= 0 ? state.metric : 0;
        notesText.push("To keep the page fast, " + tr.trimmed.nodes + " small call-tree nodes (" + tr.trimmed.stacks +
          " stacks, " + M.fmt.percent(tr.trimmed.values[m] || 0, (tr.values[m] || [0])[0]) +
          " of this metric) are merged into grey \u201crare stacks\u201d boxes.");
      }
      if (F.threads_without_tree > 0)
        notesText.push("Per-thread graphs are kept for the " + (trees.filter(function (x) { return x.scope === "thread"; }).length) +
          " busiest threads; the other " + F.threads_without_tree + " threads are in \u201cAll threads\u201d.");
      notes.textContent = notesText.join(" ");
    }

    // ---- layout and drawing ----
    let rects = []; // per depth row: [[x, w, node], ...]
    let layoutDepth = 0;
    function layout(T, width) {
      const V = T.values[state.metric];
      rects = [];
      const chain = [];
      for (let j = state.zoom; j >= 0; j = j === 0 ? -1 : T.parent[j]) chain.unshift(j);
      chain.forEach(function (node, d) { (rects[d] = rects[d] || []).push([0, width, node]); });
      const base = chain.length - 1;
      const stack = [[state.zoom, 0, width, base]];
      let drawn = chain.length;
      let maxDepth = base;
      while (stack.length) {
        const top = stack.pop();
        const node = top[0], x = top[1], w = top[2], d = top[3];
        const total = V[node];
        if (!(total > 0) || d >= MAX_DEPTH) continue; // a canvas cannot be taller than ~32k px
        let cx = x;
        const ch = sortedChildren(T, state.metric, node);
        for (let k = 0; k < ch.length; k++) {
          const c = ch[k];
          const cw = (w * V[c]) / total;
          if (cw < 0.3) break; // sorted by value: the rest are narrower
          (rects[d + 1] = rects[d + 1] || []).push([cx, cw, c]);
          drawn += 1;
          if (d + 1 > maxDepth) maxDepth = d + 1;
          stack.push([c, cx, cw, d + 1]);
          cx += cw;
        }
      }
      layoutDepth = maxDepth;
      return drawn;
    }

    function draw() {
      if (state.metric < 0) {
        status.textContent = "No metric with values in this profile.";
        canvas.dataset.drawn = "0";
        return;
      }
      const T = current();
      const V = T.values[state.metric];
      if (state.zoom >= T.n) state.zoom = 0;
      const width = Math.max(300, canvasWrap.clientWidth || 900);
      const drawn = layout(T, width);
      const height = (layoutDepth + 1) * ROW;
      const ctx = M.sizeCanvas(canvas, width, height);
      ctx.clearRect(0, 0, width, height);
      ctx.font = "12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";
      ctx.textBaseline = "middle";
      const charW = ctx.measureText("m").width || 7;
      const total = V[0];
      let matchedDrawn = 0;
      rects.forEach(function (row, d) {
        const y = state.view === "flame" ? (layoutDepth - d) * ROW : d * ROW;
        row.forEach(function (r) {
          const node = r[2], f = T.frame[node];
          const matched = !!(matchFrame && f >= 0 && matchFrame[f]);
          if (matched) matchedDrawn += 1;
          ctx.fillStyle = colour(T, node, matched, !!matchFrame && !matched);
          ctx.fillRect(r[0], y, Math.max(0.5, r[1] - 0.5), ROW - 1);
          if (r[1] > 3 * charW) {
            const name = nodeName(T, node, total);
            const n = Math.floor((r[1] - 6) / charW);
            ctx.fillStyle = matched ? "#ffffff" : "#1d1f21";
            ctx.fillText(name.length > n ? name.slice(0, Math.max(1, n - 1)) + "\u2026" : name, r[0] + 3, y + ROW / 2);
          }
        });
      });
      canvas.dataset.drawn = String(drawn);
      // Deep stacks (imports, recursion) make the canvas taller than the scroll box: show the
      // root end first, the bottom for a flame graph and the top for icicle / inverted views.
      canvasWrap.scrollTop = state.view === "flame" ? canvasWrap.scrollHeight : 0;
      const ms = matchStats(T);
      canvas.dataset.matched = ms ? String(ms.count) : "";
      const m = M.metrics[state.metric];
      if (ms) {
        const what = state.highlight ? state.highlight.label : "\u201c" + state.query + "\u201d";
        matchText.textContent = ms.count ? ms.count + " boxes match " + what + ": " + M.fmt.percent(ms.value, ms.total) + " of " + M.metricShort(m)
          : "no match for " + what;
        canvas.dataset.matchedPct = ms.total ? String((100 * ms.value) / ms.total) : "0";
      } else {
        matchText.textContent = "";
        canvas.dataset.matchedPct = "";
      }
      status.textContent = trees[state.tree].label + " \u2022 " + M.metricLabel(m) + ": " + M.fmt.value(total, m.unit) +
        (state.zoom ? " \u2022 zoomed on " + nodeName(T, state.zoom, total) + " (" + M.fmt.percent(V[state.zoom], total) + ")" : "") +
        " \u2022 " + drawn + " boxes drawn";
      void matchedDrawn;
    }

    function hit(ev) {
      const r = canvas.getBoundingClientRect();
      const x = ev.clientX - r.left, y = ev.clientY - r.top;
      const row = Math.floor(y / ROW);
      const d = state.view === "flame" ? layoutDepth - row : row;
      const rs = rects[d] || [];
      for (let k = 0; k < rs.length; k++) if (x >= rs[k][0] && x < rs[k][0] + rs[k][1]) return { node: rs[k][2], x: x, y: y };
      return null;
    }
    canvas.addEventListener("mousemove", function (ev) {
      const h = hit(ev);
      if (!h) { tip.hidden = true; return; }
      const T = current();
      const V = T.values[state.metric], m = M.metrics[state.metric];
      const f = T.frame[h.node];
      const lines = [M.el("div", { cls: "tip-title", text: nodeName(T, h.node, V[0]) })];
      if (f >= 0 && frames.file[f]) lines.push(M.el("div", { cls: "tip-loc", text: frames.file[f] + (frames.line[f] ? ":" + frames.line[f] : "") }));
      if (f >= 0) lines.push(M.el("div", { cls: "tip-kind", text: (M.kinds[frames.kind[f]] || M.kinds[3]).name }));
      lines.push(M.el("div", { text: M.metricShort(m) + ": " + M.fmt.value(V[h.node], m.unit) + " \u2022 " + M.fmt.percent(V[h.node], V[0]) + " of total" }));
      tip.replaceChildren.apply(tip, lines);
      tip.hidden = false;
      const w = canvasWrap.clientWidth || 900;
      tip.style.left = Math.min(h.x + 14, w - 320) + "px";
      tip.style.top = h.y + 14 + "px";
    });
    canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
    canvas.addEventListener("click", function (ev) {
      const h = hit(ev);
      if (!h) return;
      state.zoom = h.node;
      tip.hidden = true;
      draw();
    });
    canvas.addEventListener("keydown", function (ev) {
      if (ev.key === "Escape") { state.zoom = 0; draw(); }
    });
    window.addEventListener("resize", function () { draw(); });

    // Other sections: highlight a source line's frames, or search a function name.
    M.on("highlight-line", function (h) {
      clearTimeout(searchTimer); // a search typed just before must not undo this highlight
      state.query = "";
      search.value = "";
      const base = M.basename(h.file);
      state.highlight = {
        label: base + ":" + h.line,
        pred: function (f) {
          if (frames.file[f] !== h.file) return false;
          return frames.line[f] === h.line || (frames.kind[f] !== 1 && !!h.function && frames.name[f] === h.function);
        },
      };
      computeMatches();
      draw();
      M.scrollTo("flame");
    });
    M.on("flame-search", function (text) {
      clearTimeout(searchTimer);
      state.highlight = null;
      search.value = text;
      state.query = text;
      computeMatches();
      draw();
      M.scrollTo("flame");
    });

    buildControls();
    draw();
    M.test.flame = { state: state, draw: draw, canvas: canvas };
  }

  M.sections.push({ id: "flame", title: "Flame graph", order: 20, render: render,
                    when: function (d) { return d.flame && d.flame.trees.length && d.flame.trees[0].parent.length > 1; } });
})();
