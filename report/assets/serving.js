// mlprof HTML report: the Serving section (mlprof-run --requests; data.serving, the same object as
// `mlprof export --format json`'s "serving", docs/json-format.md, except that the per-request
// arrays are replaced by `series`, bucketed in C++: report/html_serving.h): the cloud profile's figures and
// the recommendation, advice, latency over time and its histogram, throughput, the service's CPU
// and memory over the run, and the per-request tables of the steady window.
(function () {
  "use strict";
  const M = window.MLPROF;
  const MS = 1e6;  // ns per ms: request times are in ms from the run's start, charts take ns

  function fact(dl, label, value, title) {
    dl.appendChild(M.el("dt", { text: label }));
    dl.appendChild(M.el("dd", { text: value, title: title }));
  }
  function ms(v) { return v === null || v === undefined ? "-" : M.fmt.duration(v * MS); }
  function num(v, digits) { return v === null || v === undefined ? "-" : Number(v).toFixed(digits); }

  function render(host, data) {
    const s = data.serving;
    const series = s.series;  // bucketed in C++ (report/html_serving.h)

    if (s.outcome !== "completed")
      host.appendChild(M.el("p", { cls: "note error", text: "The replay did not complete (" + s.outcome + "): " + (s.error || "") }));

    host.appendChild(M.el("p", {
      text: "Replayed " + s.requests_file + " against " + s.url + " (" +
        (s.load_mode === "open" ? "open loop at " + s.requestedQueriesPerSecond + " req/s" : "closed loop, concurrency " + s.concurrency) +
        "); " + s.warmup_queries + " warmup requests and the start-up are kept out of the steady-state figures.",
    }));

    const rec = M.el("dl", { cls: "facts" });
    const none = (s.outcome === "completed" || s.outcome === "time-limit") && !s.window_queries
      ? "none: no steady-state request was measured" : "none: the replay did not run to its end";
    fact(rec, "Recommended CPU", s.requestedCpu === null ? none : num(s.requestedCpu, 1) + " cores", "requestedCpu: peak cores used x 1.2, rounded up to 0.1 core (docs/serving.md)");
    fact(rec, "Recommended memory", s.requestedMemoryInGB === null ? none : num(s.requestedMemoryInGB, 2) + " GiB", "requestedMemoryInGB: peak RSS x 1.2, rounded up to 0.25 GiB");
    const t = s.times_ms || {};
    if (t.ready !== null && t.ready !== undefined)
      fact(rec, "Start-up", ms(t.ready) + " until the service was ready", "from the start of the run to the first HTTP answer on the URL other than 503 (model loading)");
    fact(rec, "Peak CPU used", num(s.maxUtilizedCpu, 2) + " cores of " + num(s.available_cpu, 1) + " available", "maxUtilizedCpu: highest 1 s average of the service's process tree");
    fact(rec, "Peak memory used", num(s.maxUtilizedMemoryInGB, 3) + " GiB", "maxUtilizedMemoryInGB: highest sum over the service's processes of each one's peak RSS (VmHWM, docs/serving.md)");
    fact(rec, "Queries", s.successQueries + " of " + s.totalQueries + " succeeded (successRate " + num(s.successRate, 3) + ")" +
      (s.timed_out_queries ? "; " + s.timed_out_queries + " timed out" : "") +
      (s.aborted_queries ? "; " + s.aborted_queries + " cut off at the end of the run (interrupted, or in flight 5 s after --duration), not counted" : ""));
    fact(rec, "Throughput", num(s.measuredQueriesPerSecond, 1) + " req/s (steady state)");
    fact(rec, "Latency", "average " + ms(s.averageLatencyInMs) + ", p50 " + ms(s.latencyPercentile50InMs) +
      ", p90 " + ms(s.latencyPercentile90InMs) + ", p95 " + ms(s.latencyPercentile95InMs) +
      ", p99 " + ms(s.latencyPercentile99InMs) + ", p99.9 " + ms(s.latencyPercentile999InMs));
    if (s.late_starts) fact(rec, "Late starts", s.late_starts + (s.late_starts === 1 ? " request" : " requests") + " started > 1 ms after their scheduled time (the load loop fell behind)");
    host.appendChild(rec);

    if ((s.advice || []).length) {
      host.appendChild(M.el("h3", { text: "Advice from this run" }));
      host.appendChild(M.el("ul", { cls: "advice" }, s.advice.map(function (a) { return M.el("li", { text: a }); })));
    }

    // The start-up's end and the steady window's start, on every chart over the run.
    const marks = [];
    if (t.ready !== null && t.ready !== undefined) marks.push({ t_ns: t.ready * MS, label: "ready" });
    if (t.window_start !== null && t.window_start !== undefined && s.warmup_queries)
      marks.push({ t_ns: t.window_start * MS, label: "steady state" });
    if (series && series.requests) {
      M.charts.timeline(host, {
        marks: marks,
        title: "Latency over the run (by request start; " + num(series.bucket_ms, 0) + " ms buckets)",
        series: [
          { name: "p50", unit: "us", points: series.latency.map(function (b) { return [b[0], b[1]]; }) },
          { name: "p99", unit: "us", points: series.latency.map(function (b) { return [b[0], b[2]]; }) },
        ],
        xMax: data.timelines && data.timelines.duration_ns,
      });
      M.charts.timeline(host, {
        marks: marks,
        title: "Throughput (completed requests per second)",
        series: [{ name: "req/s", unit: "count", points: series.throughput }], step: true,
        xMax: data.timelines && data.timelines.duration_ns,
      });
      if (series.histogram.length) {
        M.charts.histogram(host, {
          title: "Latency histogram (the " + series.steady + " steady-state requests with a latency" +
            (s.timed_out_queries ? ", timeouts at the time they were given up" : "") + ")",
          bins: series.histogram,
          unit: "us",
        });
      }
    }

    const res = s.resources || [];
    // A poll's cpu_cores is the rate since the poll before: a step chart draws each value from its
    // point on, so each value is placed at the start of its interval, and the last one held to its end.
    const cpuSteps = res.slice(1).map(function (r, i) { return [res[i].t_ms * MS, r.cpu_cores]; });
    if (res.length > 1) cpuSteps.push([res[res.length - 1].t_ms * MS, res[res.length - 1].cpu_cores]);
    if (res.length > 1) {
      M.charts.timeline(host, {
        marks: marks,
        title: "Service CPU (process tree: each process's scheduler clock, polled by mlprof-run)",
        series: [{ name: "cores", unit: "cores", points: cpuSteps }],
        refLines: s.available_cpu ? [{ value: s.available_cpu, label: s.available_cpu + " CPUs available" }] : [],
        step: true, xMax: data.timelines && data.timelines.duration_ns,
      });
      M.charts.timeline(host, {
        marks: marks,
        title: "Service memory (RSS summed over its processes)",
        series: [{ name: "RSS", unit: "bytes", points: res.map(function (r) { return [r.t_ms * MS, r.rss_bytes]; }) }],
        xMax: data.timelines && data.timelines.duration_ns,
      });
    }

    const per = s.per_request || { lines: [], sites: [] };
    host.appendChild(M.el("h3", { text: "CPU per request, by line (steady state, " + s.window_queries + " requests)" }));
    const lineHost = M.el("div", { cls: "table-host" });
    host.appendChild(lineHost);
    const maxCpu = per.lines.reduce(function (a, l) { return Math.max(a, l.cpu_ms_per_request); }, 0);
    new M.SortableTable(lineHost, [
      { title: "total ms/request", cls: "num", key: function (r) { return r.cpu_ms_per_request; }, text: function (r) { return num(r.cpu_ms_per_request, 3); },
        pct: function (r) { return maxCpu ? (100 * r.cpu_ms_per_request) / maxCpu : 0; } },
      { title: "self ms/request", cls: "num", key: function (r) { return r.self_cpu_ms_per_request; }, text: function (r) { return num(r.self_cpu_ms_per_request, 3); } },
      { title: "function", cls: "name", key: function (r) { return r.function.toLowerCase(); }, text: function (r) { return r.function; } },
      { title: "location", cls: "loc", key: function (r) { return r.file + ":" + r.line; }, text: function (r) { return r.file ? r.file + ":" + r.line : ""; } },
    ], per.lines, { sortIndex: 1, descending: true, showAll: false }).render();  // by self, like the text summary
    if (per.lines_note) host.appendChild(M.el("p", { cls: "note", text: "Note: " + per.lines_note + "." }));

    if (per.sites.length) {
      host.appendChild(M.el("h3", { text: "Memory per request, by allocation site (steady state)" }));
      const siteHost = M.el("div", { cls: "table-host" });
      host.appendChild(siteHost);
      new M.SortableTable(siteHost, [
        // A retained figure on fewer sampled blocks than a leak needs (retained_resolved false) is
        // sampling noise: "~0", sorted as 0 (docs/serving.md).
        { title: "retained/request", cls: "num", key: function (r) { return r.retained_resolved === false ? 0 : r.retained_bytes_per_request; },
          text: function (r) { return r.retained_resolved === false ? "~0" : M.fmt.bytes(r.retained_bytes_per_request); } },
        { title: "allocated/request", cls: "num", key: function (r) { return r.alloc_bytes_per_request; }, text: function (r) { return M.fmt.bytes(r.alloc_bytes_per_request); } },
        { title: "allocations/request", cls: "num", key: function (r) { return r.alloc_count_per_request; }, text: function (r) { return num(r.alloc_count_per_request, 2); } },
        { title: "site", cls: "name", key: function (r) { return r.site.toLowerCase(); }, text: function (r) { return r.site; } },
      ], per.sites, { sortIndex: 0, descending: true, showAll: false }).render();
      if (per.sites_note) host.appendChild(M.el("p", { cls: "note", text: per.sites_note + "." }));
    }
    M.test.serving = {
      requests: series ? series.requests : 0, answered: series ? series.answered : 0, steady: series ? series.steady : 0,
      histogram_total: series ? series.histogram.reduce(function (a, b) { return a + b.count; }, 0) : 0,
      buckets: series ? series.throughput.length : 0, lines: per.lines.length, sites: per.sites.length,
    };
  }

  M.sections.push({ id: "serving", title: "Serving", order: 5, render: render, when: function (d) { return !!d.serving; } });
})();
