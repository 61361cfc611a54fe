// mlprof HTML report: the Serving section (mlprof-run --requests; data.serving, the same object as
// `mlprof export --format json`'s "serving", docs/json-format.md): the cloud profile's figures and
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

  // Nearest-rank percentile of a sorted array (the definition docs/serving.md uses).
  function percentile(sorted, p) {
    if (!sorted.length) return 0;
    const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
    return sorted[Math.min(rank, sorted.length) - 1];
  }

  // Requests bucketed by start time: p50/p99 latency (answered requests only) and completions
  // per second; about 100 buckets over the load.
  function buckets(req, t0, t1) {
    const n = Math.min(120, Math.max(10, Math.round(req.start_ms.length / 20)));
    const width = Math.max((t1 - t0) / n, 1);
    const lat = [], done = [];
    for (let i = 0; i < n; i++) { lat.push([]); done.push(0); }
    for (let i = 0; i < req.start_ms.length; i++) {
      const b = Math.min(n - 1, Math.max(0, Math.floor((req.start_ms[i] - t0) / width)));
      if (req.status[i] > 0) lat[b].push(req.latency_ms[i]);
      const e = Math.min(n - 1, Math.max(0, Math.floor((req.start_ms[i] + req.latency_ms[i] - t0) / width)));
      done[e] += 1;
    }
    const p50 = [], p99 = [], qps = [];
    for (let i = 0; i < n; i++) {
      const t = (t0 + i * width) * MS;
      const s = lat[i].sort(function (a, b) { return a - b; });
      if (s.length) {
        p50.push([t, percentile(s, 50) * 1000]);  // us
        p99.push([t, percentile(s, 99) * 1000]);
      }
      qps.push([t, done[i] / (width / 1000)]);
    }
    return { p50: p50, p99: p99, qps: qps };
  }

  function render(host, data) {
    const s = data.serving;
    const req = s.requests || { start_ms: [], latency_ms: [], status: [] };

    if (s.outcome !== "completed")
      host.appendChild(M.el("p", { cls: "note error", text: "The replay did not complete (" + s.outcome + "): " + (s.error || "") }));

    host.appendChild(M.el("p", {
      text: "Replayed " + s.requests_file + " against " + s.url + " (" +
        (s.load_mode === "open" ? "open loop at " + s.requestedQueriesPerSecond + " req/s" : "closed loop, concurrency " + s.concurrency) +
        "); " + s.warmup_queries + " warmup requests and the start-up are kept out of the steady-state figures.",
    }));

    const rec = M.el("dl", { cls: "facts" });
    fact(rec, "Recommended CPU", num(s.requestedCpu, 1) + " cores", "requestedCpu: peak cores used x 1.2, rounded up to 0.1 core (docs/serving.md)");
    fact(rec, "Recommended memory", num(s.requestedMemoryInGB, 2) + " GiB", "requestedMemoryInGB: peak RSS x 1.2, rounded up to 0.25 GiB");
    fact(rec, "Peak CPU used", num(s.maxUtilizedCpu, 2) + " cores of " + num(s.available_cpu, 1) + " available", "maxUtilizedCpu: highest 1 s average of the service's process tree");
    fact(rec, "Peak memory used", num(s.maxUtilizedMemoryInGB, 3) + " GiB", "maxUtilizedMemoryInGB: highest RSS summed over the service's processes");
    fact(rec, "Queries", s.successQueries + " of " + s.totalQueries + " succeeded (successRate " + num(s.successRate, 3) + ")");
    fact(rec, "Throughput", num(s.measuredQueriesPerSecond, 1) + " req/s (steady state)");
    fact(rec, "Latency", "average " + ms(s.averageLatencyInMs) + ", p50 " + ms(s.latencyPercentile50InMs) +
      ", p90 " + ms(s.latencyPercentile90InMs) + ", p95 " + ms(s.latencyPercentile95InMs) +
      ", p99 " + ms(s.latencyPercentile99InMs) + ", p99.9 " + ms(s.latencyPercentile999InMs));
    if (s.late_starts) fact(rec, "Late starts", s.late_starts + " requests started > 1 ms after their scheduled time (the load loop fell behind)");
    host.appendChild(rec);

    if ((s.advice || []).length) {
      host.appendChild(M.el("h3", { text: "Advice from this run" }));
      host.appendChild(M.el("ul", { cls: "advice" }, s.advice.map(function (a) { return M.el("li", { text: a }); })));
    }

    if (req.start_ms.length) {
      const t0 = s.times_ms.load_start || req.start_ms[0];
      const t1 = s.times_ms.load_end || (req.start_ms[req.start_ms.length - 1] + req.latency_ms[req.latency_ms.length - 1]);
      const b = buckets(req, t0, t1);
      M.charts.timeline(host, {
        title: "Latency over the run (by request start)",
        series: [{ name: "p50", unit: "us", points: b.p50 }, { name: "p99", unit: "us", points: b.p99 }],
        xMax: data.timelines && data.timelines.duration_ns,
      });
      M.charts.timeline(host, {
        title: "Throughput (completed requests per second)",
        series: [{ name: "req/s", unit: "count", points: b.qps }], step: true,
        xMax: data.timelines && data.timelines.duration_ns,
      });
      const answered = [];
      for (let i = 0; i < req.latency_ms.length; i++) if (req.status[i] > 0) answered.push(req.latency_ms[i] * 1000);
      if (answered.length) M.charts.histogram(host, { title: "Latency histogram (answered requests)", values: answered, unit: "us", bins: 40 });
    }

    const res = s.resources || [];
    if (res.length > 1) {
      M.charts.timeline(host, {
        title: "Service CPU (process tree, measured from /proc)",
        series: [{ name: "cores", unit: "cores", points: res.map(function (r) { return [r.t_ms * MS, r.cpu_cores]; }) }],
        refLines: s.available_cpu ? [{ value: s.available_cpu, label: s.available_cpu + " CPUs available" }] : [],
        step: true, xMax: data.timelines && data.timelines.duration_ns,
      });
      M.charts.timeline(host, {
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
    ], per.lines, { sortIndex: 0, descending: true, showAll: false }).render();

    if (per.sites.length) {
      host.appendChild(M.el("h3", { text: "Memory per request, by allocation site (steady state)" }));
      const siteHost = M.el("div", { cls: "table-host" });
      host.appendChild(siteHost);
      new M.SortableTable(siteHost, [
        { title: "retained/request", cls: "num", key: function (r) { return r.retained_bytes_per_request; }, text: function (r) { return M.fmt.bytes(r.retained_bytes_per_request); } },
        { title: "allocated/request", cls: "num", key: function (r) { return r.alloc_bytes_per_request; }, text: function (r) { return M.fmt.bytes(r.alloc_bytes_per_request); } },
        { title: "allocations/request", cls: "num", key: function (r) { return r.alloc_count_per_request; }, text: function (r) { return num(r.alloc_count_per_request, 2); } },
        { title: "site", cls: "name", key: function (r) { return r.site.toLowerCase(); }, text: function (r) { return r.site; } },
      ], per.sites, { sortIndex: 0, descending: true, showAll: false }).render();
    }
    M.test.serving = { requests: req.start_ms.length, lines: per.lines.length, sites: per.sites.length };
  }

  M.sections.push({ id: "serving", title: "Serving", order: 5, render: render, when: function (d) { return !!d.serving; } });
})();
