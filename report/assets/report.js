// mlprof HTML report: renders sortable tables from the embedded JSON data block (id "mlprof-data").
// Inlined into the page by report/embed_assets.cmake.
// Safety rule: text from the profiled program (symbols, paths, argv, thread names) is only ever
// inserted with textContent or setAttribute, never through innerHTML.
(function () {
  "use strict";

  const ROW_LIMIT = 200; // rows shown before "show all"

  const data = JSON.parse(document.getElementById("mlprof-data").textContent);
  let metric = data.default_metric; // index into data.metrics, -1 when there are none

  // ---- formatting (mirrors report/format.cpp) ----

  function formatDurationNs(ns) {
    const ms = ns / 1e6;
    return Math.abs(ms) >= 1000 ? (ms / 1000).toFixed(2) + " s" : ms.toFixed(1) + " ms";
  }

  function formatValue(value, unit) {
    if (unit === "us") return formatDurationNs(value * 1000);
    if (unit === "ns") return formatDurationNs(value);
    if (unit === "bytes") {
      const units = ["KiB", "MiB", "GiB", "TiB"];
      if (Math.abs(value) < 1024) return value + " B";
      let v = value;
      let u = -1;
      while (Math.abs(v) >= 1024 && u < units.length - 1) {
        v /= 1024;
        u += 1;
      }
      return v.toFixed(1) + " " + units[u];
    }
    return String(value);
  }

  function percent(part, whole) {
    return whole === 0 ? null : (100 * part) / whole;
  }

  function formatPercent(p) {
    return p === null ? "-" : p.toFixed(1) + "%";
  }

  function basename(path) {
    const i = path.lastIndexOf("/");
    return i < 0 || i === path.length - 1 ? path : path.slice(i + 1);
  }

  function location(fn) {
    if (fn.file) return fn.line ? fn.file + ":" + fn.line : fn.file;
    return basename(fn.module);
  }

  function el(tag, text, className) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (className) e.className = className;
    return e;
  }

  // ---- sortable table ----

  // columns: [{title, key(row) -> sort key, text(row) -> cell text, cls, pct(row) -> bar %}]
  // A table sorts by clicking a header; numbers sort descending first, text ascending.
  // state: {sortIndex, descending, showAll}, kept by the caller so a re-render (another metric)
  // keeps the user's sort order.
  function SortableTable(host, columns, rows, state) {
    this.host = host;
    this.columns = columns;
    this.rows = rows;
    this.state = state;
  }

  SortableTable.prototype.isNumeric = function (i) {
    return (this.columns[i].cls || "").indexOf("num") >= 0;
  };

  SortableTable.prototype.sortBy = function (i) {
    if (this.state.sortIndex === i) {
      this.state.descending = !this.state.descending;
    } else {
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
        return a.i - b.i; // stable
      })
      .map(function (x) { return x.row; });
  };

  SortableTable.prototype.render = function () {
    const self = this;
    const table = el("table");
    const head = table.createTHead().insertRow();
    this.columns.forEach(function (col, i) {
      const th = el("th", null, col.cls);
      th.setAttribute("scope", "col");
      if (i === self.state.sortIndex) {
        th.setAttribute("aria-sort", self.state.descending ? "descending" : "ascending");
      }
      const button = el("button", col.title);
      button.type = "button";
      button.addEventListener("click", function () { self.sortBy(i); });
      th.appendChild(button);
      head.appendChild(th);
    });
    const body = table.createTBody();
    const rows = this.sorted();
    const shown = this.state.showAll ? rows : rows.slice(0, ROW_LIMIT);
    shown.forEach(function (row) {
      const tr = body.insertRow();
      self.columns.forEach(function (col) {
        const text = col.text(row);
        const td = el("td", text, col.cls);
        if (col.cls === "name" || col.cls === "loc") td.setAttribute("title", text);
        if (col.pct) {
          const p = Math.max(0, Math.min(100, col.pct(row) || 0));
          td.classList.add("pct");
          td.style.backgroundSize = p.toFixed(1) + "% 100%";
        }
        tr.appendChild(td);
      });
    });
    const parts = [table];
    if (rows.length === 0) parts.push(el("p", "No data.", "note"));
    if (rows.length > shown.length) {
      const more = el("button", "Show all " + rows.length + " rows", "more");
      more.type = "button";
      more.addEventListener("click", function () {
        self.state.showAll = true;
        self.render();
      });
      parts.push(more);
    }
    this.host.replaceChildren.apply(this.host, parts);
  };

  // ---- the report's tables ----

  function metricInfo() {
    return metric >= 0 ? data.metrics[metric] : { name: "-", unit: "count", total: 0 };
  }

  function valueColumns(self, total) {
    const m = metricInfo();
    const cols = [];
    if (self) {
      cols.push({ title: "self", cls: "num", key: self, text: function (r) { return formatValue(self(r), m.unit); } });
      cols.push({
        title: "self %", cls: "num",
        key: self,
        text: function (r) { return formatPercent(percent(self(r), m.total)); },
        pct: function (r) { return percent(self(r), m.total); },
      });
    }
    if (total) {
      cols.push({ title: "total", cls: "num", key: total, text: function (r) { return formatValue(total(r), m.unit); } });
      cols.push({
        title: "total %", cls: "num",
        key: total,
        text: function (r) { return formatPercent(percent(total(r), m.total)); },
        pct: function (r) { return percent(total(r), m.total); },
      });
    }
    return cols;
  }

  function at(values) {
    return metric >= 0 && metric < values.length ? values[metric] : 0;
  }

  function text(f) {
    return { key: function (r) { return f(r).toLowerCase(); }, text: f };
  }

  function column(title, cls, spec) {
    return Object.assign({ title: title, cls: cls }, spec);
  }

  function number(f) {
    return { key: f, text: function (r) { const v = f(r); return v === null || v === undefined ? "-" : String(v); } };
  }

  // Where a line's own time went (Python profiles): shares of its self time in the interpreter,
  // in native code and in system calls, when the profile has those metrics.
  function splitColumns() {
    const names = data.metrics.map(function (m) { return m.name; });
    const cpu = names.indexOf("cpu");
    const parts = [["interp %", "cpu-interpreter"], ["native %", "cpu-native"], ["system %", "cpu-system"]];
    if (cpu < 0 || parts.some(function (p) { return names.indexOf(p[1]) < 0; })) return [];
    return parts.map(function (p) {
      const k = names.indexOf(p[1]);
      const share = function (r) { return percent(r.self[k], r.self[cpu]); };
      return { title: p[0], cls: "num", key: share, text: function (r) { return formatPercent(share(r)); } };
    });
  }

  function selfOf(r) { return at(r.self); }
  function totalOf(r) { return at(r.total); }

  // Initial sort of each table: functions and lines by self, processes by pid, threads by metric.
  const tableState = {
    functions: { sortIndex: 2, descending: true, showAll: false },
    lines: { sortIndex: 2, descending: true, showAll: false },
    processes: { sortIndex: 0, descending: false, showAll: false },
    threads: { sortIndex: 4, descending: true, showAll: false },
    leaks: { sortIndex: 1, descending: true, showAll: false },
  };

  const builders = {
    functions: function () {
      const cols = [
        column("function", "name", text(function (r) { return r.name || "[unknown]"; })),
        column("module / file", "loc", text(location)),
      ].concat(valueColumns(selfOf, totalOf));
      return new SortableTable(document.getElementById("functions-table"), cols, data.functions, tableState.functions);
    },
    lines: function () {
      const cols = [
        column("line", "loc", text(function (r) { return (r.file || "?") + ":" + r.line; })),
        column("function", "name", text(function (r) { return r.function || "[unknown]"; })),
      ].concat(valueColumns(selfOf, totalOf), splitColumns(), [
        column("source", "src", text(function (r) { return r.source || ""; })),
      ]);
      return new SortableTable(document.getElementById("lines-table"), cols, data.lines, tableState.lines);
    },
    processes: function () {
      const m = metricInfo();
      const cols = [
        column("pid", "num", number(function (r) { return r.pid; })),
        column("ppid", "num", number(function (r) { return r.ppid; })),
        column("command", "name", text(function (r) { return r.argv.length ? r.argv.join(" ") : r.exe; })),
        column("end", "", text(function (r) { return r.end_reason; })),
        column("exit", "num", {
          key: function (r) { return r.exit_status; },
          text: function (r) { return r.exit_status < 0 ? "-" : String(r.exit_status); },
        }),
        column("samples", "num", number(function (r) { return r.samples; })),
        column(m.name, "num", {
          key: function (r) { return at(r.values); },
          text: function (r) { return formatValue(at(r.values), m.unit); },
        }),
      ];
      return new SortableTable(document.getElementById("processes-table"), cols, data.processes, tableState.processes);
    },
    threads: function () {
      const m = metricInfo();
      const cols = [
        column("pid", "num", number(function (r) { return r.pid; })),
        column("tid", "num", number(function (r) { return r.tid; })),
        column("name", "name", text(function (r) { return r.name; })),
        column("samples", "num", {
          key: function (r) { return r.samples === null ? -1 : r.samples; },
          text: function (r) { return r.samples === null ? "-" : String(r.samples); },
        }),
      ].concat(valueColumns(function (r) { return at(r.values); }, null));
      cols[4].title = m.name;
      cols[5].title = m.name + " %";
      return new SortableTable(document.getElementById("threads-table"), cols, data.threads, tableState.threads);
    },
    // Memory profiles only (the section exists when the profile has memory data).
    leaks: function () {
      const host = document.getElementById("leaks-table");
      if (!host) return null;
      const cols = [
        column("kind", "", text(function (r) { return r.kind; })),
        column("bytes", "num", { key: function (r) { return r.bytes; }, text: function (r) { return formatValue(r.bytes, "bytes"); } }),
        column("count", "num", number(function (r) { return r.count; })),
        column("growth/s", "num", {
          key: function (r) { return r.growth_bytes_per_s; },
          text: function (r) { return r.growth_bytes_per_s ? formatValue(r.growth_bytes_per_s, "bytes") + "/s" : "-"; },
        }),
        column("confidence", "num", {
          key: function (r) { return r.confidence; },
          text: function (r) { return (100 * r.confidence).toFixed(0) + "%"; },
        }),
        column("pid", "num", number(function (r) { return r.pid; })),
        column("site", "name", text(function (r) { return r.site; })),
      ];
      return new SortableTable(host, cols, data.leak_candidates || [], tableState.leaks);
    },
  };

  function renderAll() {
    Object.keys(builders).forEach(function (name) {
      const table = builders[name]();
      if (table) table.render();
    });
  }

  function metricPicker() {
    if (data.metrics.length < 2) return;
    const host = document.getElementById("controls");
    const label = el("label", "Metric");
    const select = el("select");
    select.id = "metric";
    label.htmlFor = "metric";
    data.metrics.forEach(function (m, i) {
      const opt = el("option", m.name + " (" + formatValue(m.total, m.unit) + ")");
      opt.value = String(i);
      opt.selected = i === metric;
      select.appendChild(opt);
    });
    select.addEventListener("change", function () {
      metric = Number(select.value);
      renderAll();
    });
    host.replaceChildren(label, select);
  }

  metricPicker();
  renderAll();
})();
