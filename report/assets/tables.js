// mlprof HTML report: sortable tables (MLPROF.SortableTable) and the Functions, Lines and Leak
// candidates sections.
//
// new MLPROF.SortableTable(host, columns, rows, state).render()
//   columns: [{title, cls ("num" right-aligns and sorts descending first), key(row) -> sort key,
//              text(row) -> cell text, pct(row) -> bar %, cell(row, td) -> custom content}]
//   state:   {sortIndex, descending, showAll}, kept by the caller so a re-render keeps the order.
(function () {
  "use strict";
  const M = window.MLPROF;
  const ROW_LIMIT = 200;

  function SortableTable(host, columns, rows, state) {
    this.host = host;
    this.columns = columns;
    this.rows = rows;
    this.state = state;
  }
  SortableTable.prototype.isNumeric = function (i) { return (this.columns[i].cls || "").indexOf("num") >= 0; };
  SortableTable.prototype.sortBy = function (i) {
    if (this.state.sortIndex === i) this.state.descending = !this.state.descending;
    else {
      this.state.sortIndex = i;
      this.state.descending = this.isNumeric(i);
    }
    this.render();
  };
  SortableTable.prototype.sorted = function () {
    const key = this.columns[this.state.sortIndex].key;
    const dir = this.state.descending ? -1 : 1;
    return this.rows
      .map(function (row, i) { return { row: row, k: key(row), i: i }; })
      .sort(function (a, b) {
        if (a.k < b.k) return -dir;
        if (a.k > b.k) return dir;
        return a.i - b.i;
      })
      .map(function (x) { return x.row; });
  };
  SortableTable.prototype.render = function () {
    const self = this;
    const table = M.el("table", { cls: "data" });
    const head = table.createTHead().insertRow();
    this.columns.forEach(function (col, i) {
      const th = M.el("th", { cls: col.cls, attrs: { scope: "col" } });
      if (i === self.state.sortIndex) th.setAttribute("aria-sort", self.state.descending ? "descending" : "ascending");
      if (col.key) th.appendChild(M.button(col.title, function () { self.sortBy(i); }));
      else th.textContent = col.title;
      head.appendChild(th);
    });
    const body = table.createTBody();
    const rows = this.sorted();
    const shown = this.state.showAll ? rows : rows.slice(0, ROW_LIMIT);
    shown.forEach(function (row) {
      const tr = body.insertRow();
      self.columns.forEach(function (col) {
        const td = M.el("td", { cls: col.cls });
        if (col.cell) col.cell(row, td);
        else {
          const text = col.text(row);
          td.textContent = text;
          if (col.cls === "name" || col.cls === "loc") td.setAttribute("title", text);
        }
        if (col.pct) {
          const p = Math.max(0, Math.min(100, col.pct(row) || 0));
          td.classList.add("pct");
          td.style.backgroundSize = p.toFixed(1) + "% 100%";
        }
        tr.appendChild(td);
      });
    });
    const parts = [table];
    if (rows.length === 0) parts.push(M.el("p", { cls: "note", text: "No data." }));
    if (rows.length > shown.length) {
      parts.push(M.button("Show all " + rows.length + " rows", function () {
        self.state.showAll = true;
        self.render();
      }, "more"));
    }
    this.host.replaceChildren.apply(this.host, parts);
  };
  M.SortableTable = SortableTable;

  // ---- helpers shared by the tables ----
  function pctOf(v, total) { return total ? (100 * v) / total : null; }
  function textCol(title, cls, f) { return { title: title, cls: cls, key: function (r) { return f(r).toLowerCase(); }, text: f }; }
  M.valueColumns = function (metric, self, total) {
    const m = M.metrics[metric];
    const cols = [];
    const add = function (name, f) {
      cols.push({ title: name, cls: "num", key: f, text: function (r) { return M.fmt.value(f(r), m.unit); } });
      cols.push({ title: name + " %", cls: "num", key: f, text: function (r) { return M.fmt.percent(f(r), m.total); }, pct: function (r) { return pctOf(f(r), m.total); } });
    };
    if (self) add("self", self);
    if (total) add("total", total);
    return cols;
  };
  // A metric picker above a table; onChange(newIndex).
  M.metricPicker = function (id, metric, onChange) {
    const ms = M.metrics.filter(function (m) { return m.total !== 0; });
    if (ms.length < 2) return null;
    return M.select(id, "Metric", ms.map(function (m) { return { value: m.index, text: M.metricLabel(m) + " \u2014 " + M.fmt.value(m.total, m.unit) }; }),
      metric, function (v) { onChange(Number(v)); });
  };
  function location(fn) {
    if (fn.file) return fn.line ? fn.file + ":" + fn.line : fn.file;
    return M.basename(fn.module);
  }

  function tableSection(id, rowsOf, baseCols, omittedKey, what) {
    return function (host, data) {
      let metric = data.default_metric;
      const state = { sortIndex: baseCols().length, descending: true, showAll: false };
      const tableHost = M.el("div", { cls: "table-host", attrs: { id: id + "-table" } });
      const picker = M.metricPicker(id + "-metric", metric, function (v) { metric = v; draw(); });
      if (picker) host.appendChild(M.el("div", { cls: "controls" }, [picker]));
      host.appendChild(tableHost);
      if (data[omittedKey] > 0)
        host.appendChild(M.el("p", { cls: "note", text: data[omittedKey] + " more " + what + " with smaller values are not listed (see mlprof export --format json)." }));
      function draw() {
        const cols = baseCols().concat(M.valueColumns(metric,
          function (r) { return r.self[metric] || 0; }, function (r) { return r.total[metric] || 0; }));
        if (id === "lines") cols.push(textCol("source", "src", function (r) { return r.source || ""; }));
        new SortableTable(tableHost, cols, rowsOf(data), state).render();
      }
      if (metric >= 0) draw();
    };
  }

  M.sections.push({
    id: "functions", title: "Functions", order: 40,
    when: function (d) { return d.functions.length && d.default_metric >= 0; },
    render: tableSection("functions", function (d) { return d.functions; }, function () {
      return [textCol("function", "name", function (r) { return r.name || "[unknown]"; }), textCol("module / file", "loc", location)];
    }, "functions_omitted", "functions"),
  });
  M.sections.push({
    id: "lines", title: "Lines", order: 45,
    when: function (d) { return d.lines.length && d.default_metric >= 0; },
    render: tableSection("lines", function (d) { return d.lines; }, function () {
      return [textCol("line", "loc", function (r) { return (r.file || "?") + ":" + r.line; }), textCol("function", "name", function (r) { return r.function || "[unknown]"; })];
    }, "lines_omitted", "lines"),
  });

  M.sections.push({
    id: "leaks", title: "Leak candidates", order: 60,
    when: function (d) { return d.memory; },
    render: function (host, data) {
      const rows = data.leak_candidates || [];
      host.appendChild(M.el("p", { cls: "note", text: "Allocation sites whose memory was still live at exit, or grew steadily over the run (docs/report.md, \u201cLeak candidates\u201d). Figures are estimates from sampled allocations." }));
      const tableHost = M.el("div", { cls: "table-host", attrs: { id: "leaks-table" } });
      host.appendChild(tableHost);
      if (!rows.length) {
        tableHost.appendChild(M.el("p", { cls: "note", text: "No allocation site looks like a leak in this run." }));
        return;
      }
      const num = function (title, f, unit) { return { title: title, cls: "num", key: f, text: function (r) { return unit ? M.fmt.value(f(r), unit) : String(f(r)); } }; };
      const cols = [
        textCol("kind", "", function (r) { return r.kind; }),
        num("bytes", function (r) { return r.bytes; }, "bytes"),
        num("count", function (r) { return r.count; }),
        { title: "growth/s", cls: "num", key: function (r) { return r.growth_bytes_per_s; }, text: function (r) { return r.growth_bytes_per_s ? M.fmt.bytes(r.growth_bytes_per_s) + "/s" : "-"; } },
        { title: "confidence", cls: "num", key: function (r) { return r.confidence; }, text: function (r) { return (100 * r.confidence).toFixed(0) + "%"; } },
        num("pid", function (r) { return r.pid; }),
        textCol("site", "name", function (r) { return r.site; }),
      ];
      new SortableTable(tableHost, cols, rows, { sortIndex: 1, descending: true, showAll: false }).render();
    },
  });
})();
