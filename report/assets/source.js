// mlprof HTML report: the source view (data.source, built in report/html_source.cpp).
//
// For each hot file: its lines with a bar and a number per metric (CPU split into Python /
// native / system when the profile has it, waiting, memory allocated and at peak, copies, GPU).
// Lines are shown in file order around the hot lines (cold context folded; "show" unfolds it),
// or sorted by any column (click its header). Clicking a line number highlights the line's
// frames in the flame graph. Only hot regions carry text (the C++ side embeds nothing else).
(function () {
  "use strict";
  const M = window.MLPROF;
  const SHOWN_CONTEXT = 2; // context lines shown unfolded around a hot line

  // Columns: the metrics worth a column, in a fixed, readable order; unknown metrics after.
  function columns() {
    const has = function (n) { const i = M.metricIndex(n); return i >= 0 && M.metrics[i].total > 0 ? i : -1; };
    const order = [];
    const split = ["cpu-interpreter", "cpu-native", "cpu-system"].map(has);
    if (split.every(function (i) { return i >= 0; }) || split.some(function (i) { return i >= 0; })) {
      split.forEach(function (i) { if (i >= 0) order.push(i); });
    } else if (has("cpu") >= 0) order.push(has("cpu"));
    ["wait", "alloc-bytes", "live-peak-bytes", "copy-bytes", "gpu"].forEach(function (n) { if (has(n) >= 0) order.push(has(n)); });
    const skip = ["cpu", "wall", "alloc-count", "live-end-bytes"];
    M.metrics.forEach(function (m) {
      if (m.total > 0 && order.indexOf(m.index) < 0 && skip.indexOf(m.name) < 0) order.push(m.index);
    });
    if (!order.length && has("cpu") >= 0) order.push(has("cpu"));
    return order;
  }

  function render(host, data) {
    const src = data.source;
    const cols = columns();
    const intro = M.el("p", { cls: "note", text: "Per-line values are the line's own (self) share: for Python, time while it is the innermost Python line, native code it calls included. Bars are shares of the whole run. Click a line number to see its stacks in the flame graph." });
    host.appendChild(intro);
    src.files.forEach(function (file, fi) {
      host.appendChild(fileBlock(file, fi, cols));
    });
    if (src.omitted_files > 0)
      host.appendChild(M.el("p", { cls: "note", text: src.omitted_files + " more files have lines with small values; they are in the Lines table." }));

    M.on("show-line", function (h) {
      const blocks = host.querySelectorAll(".src-file");
      for (let k = 0; k < blocks.length; k++) {
        if (blocks[k].dataset.path !== h.file) continue;
        blocks[k].open = true;
        const row = blocks[k].querySelector('tr[data-line="' + Number(h.line) + '"]');
        if (row) {
          row.classList.add("flash");
          row.scrollIntoView({ block: "center" });
          return;
        }
      }
      M.emit("highlight-line", h);
    });
  }

  function fileBlock(file, fi, cols) {
    const details = M.el("details", { cls: "src-file", attrs: { "data-path": file.path } });
    details.open = fi < 3;
    const summ = M.el("summary");
    summ.appendChild(M.el("span", { cls: "src-path", text: file.path, title: file.path }));
    const totals = cols.map(function (m) {
      return M.metricShort(M.metrics[m]) + " " + M.fmt.percent(file.total[m], M.metrics[m].total);
    }).join(" \u2022 ");
    summ.appendChild(M.el("span", { cls: "src-totals", text: totals }));
    details.appendChild(summ);

    // The hottest line: by the default metric (CPU) when the file has any, else by its largest share.
    const byLine = {};
    const dm = M.data.default_metric;
    const useDefault = dm >= 0 && file.total[dm] > 0;
    let hottest = -1, hottestScore = -1;
    file.line.forEach(function (n, k) {
      byLine[n] = k;
      let s = 0;
      if (useDefault) s = file.self[k][dm];
      else cols.forEach(function (m) { if (M.metrics[m].total > 0) s = Math.max(s, file.self[k][m] / M.metrics[m].total); });
      if (s > hottestScore) { hottestScore = s; hottest = n; }
    });
    const text = {};
    file.regions.forEach(function (r) { r.text.forEach(function (t, k) { text[r.start + k] = t; }); });
    const hotLines = file.line.filter(function (n, k) { return file.hot[k]; });
    const near = function (n) {
      for (let k = 0; k < hotLines.length; k++) if (Math.abs(hotLines[k] - n) <= SHOWN_CONTEXT) return true;
      return false;
    };
    const state = { sort: -1, desc: true }; // sort: -1 = file order, else a column position
    const host = M.el("div", { cls: "table-host" });
    details.appendChild(host);
    if (!file.readable) host.appendChild(M.el("p", { cls: "note", text: "The source of this file was not readable when the report was made: values only." }));
    const tableHost = M.el("div");
    host.appendChild(tableHost);

    function row(n) {
      const k = byLine[n];
      const tr = M.el("tr", { attrs: { "data-line": n } });
      if (k !== undefined && file.hot[k]) tr.classList.add("hot");
      if (n === hottest) tr.classList.add("hottest");
      const link = M.button(String(n), function () {
        M.emit("highlight-line", { file: file.path, line: n, function: k !== undefined ? file.function[k] : "" });
      }, "lineno");
      link.setAttribute("title", "Show this line's stacks in the flame graph");
      tr.appendChild(M.el("td", { cls: "num" }, [link]));
      cols.forEach(function (m) {
        const td = M.el("td", { cls: "num bar-cell" });
        if (k !== undefined && file.self[k][m]) {
          const v = file.self[k][m], mt = M.metrics[m];
          const pct = mt.total ? (100 * v) / mt.total : 0;
          const bar = M.el("span", { cls: "bar m" + (cols.indexOf(m) % 8) });
          bar.style.width = Math.max(1, Math.min(100, pct)) + "%";
          td.appendChild(bar);
          td.appendChild(M.el("span", { cls: "v", text: M.fmt.value(v, mt.unit), title: M.fmt.percent(v, mt.total) + " of " + M.metricShort(mt) }));
        }
        tr.appendChild(td);
      });
      const code = M.el("td", { cls: "code" });
      code.appendChild(M.el("code", { text: text[n] !== undefined ? text[n] : k !== undefined ? "" : "" }));
      if (text[n] === undefined && k !== undefined && file.function[k]) code.appendChild(M.el("span", { cls: "muted", text: "  (" + file.function[k] + ")" }));
      tr.appendChild(code);
      return tr;
    }

    function build() {
      const table = M.el("table", { cls: "source" });
      const head = table.createTHead().insertRow();
      const th0 = M.el("th", { cls: "num", attrs: { scope: "col" } }, [M.button("line", function () { state.sort = -1; build(); })]);
      if (state.sort === -1) th0.setAttribute("aria-sort", "ascending");
      head.appendChild(th0);
      cols.forEach(function (m, ci) {
        const th = M.el("th", { cls: "num", attrs: { scope: "col" } }, [M.button(M.metricShort(M.metrics[m]), function () {
          if (state.sort === ci) state.desc = !state.desc;
          else { state.sort = ci; state.desc = true; }
          build();
        })]);
        if (state.sort === ci) th.setAttribute("aria-sort", state.desc ? "descending" : "ascending");
        head.appendChild(th);
      });
      head.appendChild(M.el("th", { text: "source", attrs: { scope: "col" } }));
      const body = table.createTBody();
      if (state.sort >= 0) {
        const m = cols[state.sort];
        const lines = file.line.slice().sort(function (a, b) {
          const d = file.self[byLine[b]][m] - file.self[byLine[a]][m];
          return (state.desc ? d : -d) || a - b;
        });
        lines.forEach(function (n) { body.appendChild(row(n)); });
      } else {
        // File order: every line with text or values; cold stretches folded.
        const all = {};
        Object.keys(text).forEach(function (n) { all[n] = 1; });
        file.line.forEach(function (n) { all[n] = 1; });
        const nums = Object.keys(all).map(Number).sort(function (a, b) { return a - b; });
        let prev = 0, fold = [];
        const flush = function () {
          if (!fold.length) return;
          const hidden = fold.slice();
          const tr = M.el("tr", { cls: "fold" });
          const td = M.el("td", { attrs: { colspan: cols.length + 2 } });
          td.appendChild(M.button("\u22ef show " + hidden.length + " line" + (hidden.length === 1 ? "" : "s") + " (" + hidden[0] + "\u2013" + hidden[hidden.length - 1] + ")", function () {
            const frag = document.createDocumentFragment();
            hidden.forEach(function (n) { frag.appendChild(row(n)); });
            tr.replaceWith(frag);
          }, "link"));
          tr.appendChild(td);
          body.appendChild(tr);
          fold = [];
        };
        nums.forEach(function (n) {
          if (prev && n > prev + 1) {
            flush();
            const gap = M.el("tr", { cls: "gap" });
            gap.appendChild(M.el("td", { attrs: { colspan: cols.length + 2 }, text: "lines " + (prev + 1) + "\u2013" + (n - 1) + " not included (no samples nearby)" }));
            body.appendChild(gap);
          }
          const k = byLine[n];
          if (near(n) || (k !== undefined && file.hot[k])) {
            flush();
            body.appendChild(row(n));
          } else fold.push(n);
          prev = n;
        });
        flush();
      }
      tableHost.replaceChildren(table);
    }
    build();
    return details;
  }

  M.sections.push({ id: "source", title: "Source", order: 30, render: render,
                    when: function (d) { return d.source && d.source.files.length; } });
})();
