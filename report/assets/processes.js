// mlprof HTML report: the Processes and threads section: the process tree (parent -> children,
// as the profiled command started them) and a sortable thread table with a small activity strip
// per thread (share of a CPU over the run, from data.timelines.strips).
(function () {
  "use strict";
  const M = window.MLPROF;

  function render(host, data) {
    let metric = data.default_metric;
    const procs = data.processes;
    const picker = M.metricPicker("threads-metric", metric, function (v) { metric = v; draw(); });
    if (picker) host.appendChild(M.el("div", { cls: "controls" }, [picker]));
    const treeHost = M.el("div", { cls: "proc-tree" });
    const tableHost = M.el("div", { cls: "table-host", attrs: { id: "threads-table" } });
    host.appendChild(M.el("h3", { text: "Processes (" + procs.length + ")" }));
    host.appendChild(treeHost);
    host.appendChild(M.el("h3", { text: "Threads (" + data.threads.length + ")" }));
    host.appendChild(tableHost);

    const strips = {};
    ((data.timelines && data.timelines.strips && data.timelines.strips.threads) || []).forEach(function (s) { strips[s.thread] = s.busy; });
    const rows = data.threads.map(function (t, i) { return Object.assign({ index: i }, t); });
    const state = { sortIndex: 4, descending: true, showAll: false };

    function processTree() {
      const byPid = {};
      procs.forEach(function (p, i) { byPid[p.pid] = i; });
      const kids = procs.map(function () { return []; });
      const roots = [];
      procs.forEach(function (p, i) {
        const parent = byPid[p.ppid];
        if (parent !== undefined && parent !== i) kids[parent].push(i);
        else roots.push(i);
      });
      const m = metric >= 0 ? M.metrics[metric] : null;
      const seen = procs.map(function () { return false; });
      function item(i, depth) {
        const p = procs[i];
        seen[i] = true;
        const li = M.el("li");
        const line = M.el("div", { cls: "proc" });
        line.appendChild(M.el("span", { cls: "pid", text: String(p.pid) }));
        line.appendChild(M.el("span", { cls: "name", text: (p.argv && p.argv.length ? p.argv.join(" ") : p.exe), title: p.exe }));
        const facts = [p.end_reason + (p.exit_status >= 0 ? " " + p.exit_status : ""), M.fmt.duration(Math.max(0, p.end_ns - p.start_ns))];
        if (m) facts.push(M.metricShort(m) + " " + M.fmt.value(p.values[metric], m.unit) + " (" + M.fmt.percent(p.values[metric], m.total) + ")");
        line.appendChild(M.el("span", { cls: "facts", text: facts.join(" \u2022 ") }));
        li.appendChild(line);
        const sub = kids[i].filter(function (k) { return !seen[k]; });
        if (sub.length && depth < 50) li.appendChild(M.el("ul", {}, sub.map(function (k) { return item(k, depth + 1); })));
        return li;
      }
      const items = roots.map(function (i) { return item(i, 0); });
      // Processes in a parent cycle (pid reuse) are not under any root: list them at the top level.
      procs.forEach(function (p, i) { if (!seen[i]) items.push(item(i, 0)); });
      treeHost.replaceChildren(M.el("ul", { cls: "tree" }, items));
    }

    function draw() {
      processTree();
      const cols = [
        { title: "pid", cls: "num", key: function (r) { return r.pid; }, text: function (r) { return String(r.pid); } },
        { title: "tid", cls: "num", key: function (r) { return r.tid; }, text: function (r) { return String(r.tid); } },
        { title: "name", cls: "name", key: function (r) { return r.name.toLowerCase(); }, text: function (r) { return r.name; } },
        { title: "samples", cls: "num", key: function (r) { return r.samples === null ? -1 : r.samples; }, text: function (r) { return r.samples === null ? "-" : String(r.samples); } },
      ];
      if (metric >= 0) {
        const vc = M.valueColumns(metric, function (r) { return r.values[metric]; }, null);
        vc[0].title = M.metricShort(M.metrics[metric]);
        vc[1].title = "%";
        cols.push(vc[0], vc[1]);
      }
      cols.push({
        title: "activity over the run", cls: "strip",
        cell: function (r, td) {
          const s = strips[r.index];
          if (s) td.appendChild(M.charts.strip(M.el("canvas", { attrs: { "aria-label": "CPU use over time of thread " + r.tid } }), s));
        },
      });
      new M.SortableTable(tableHost, cols, rows, state).render();
    }
    draw();
  }

  M.sections.push({ id: "processes", title: "Processes and threads", order: 50, render: render,
                    when: function (d) { return d.processes.length || d.threads.length; } });
})();
