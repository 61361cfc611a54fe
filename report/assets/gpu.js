// mlprof HTML report: the GPU section (data.gpu, the same array as `mlprof export --format json`'s
// "gpu", docs/json-format.md): per process with CUDA activity, the split of GPU time (kernels,
// copies by direction, memset), the kernel table with each kernel's launching line, and per device
// the utilization and device-memory timelines with the stacks holding the peak. GPU time per line
// is in the flame graph and source view (metric `gpu`).
(function () {
  "use strict";
  const M = window.MLPROF;

  function fact(dl, label, value, title) {
    dl.appendChild(M.el("dt", { text: label }));
    dl.appendChild(M.el("dd", { text: value, title: title }));
  }
  function where(launch) {
    if (!launch) return "(launch not seen)";
    const loc = launch.file ? M.basename(launch.file) + ":" + launch.line : "";
    return (launch.function || "?") + (loc ? " (" + loc + ")" : "");
  }

  function renderProcess(host, data, g) {
    const t = g.totals || {};
    const v = function (k) { return Number(t[k] || 0); };
    const busy = v("kernel_ns") + v("memcpy_htod_ns") + v("memcpy_dtoh_ns") + v("memcpy_dtod_ns") + v("memcpy_other_ns") + v("memset_ns");
    const dl = M.el("dl", { cls: "facts" });
    fact(dl, "GPU time", M.fmt.duration(busy), "kernels + copies + memsets, summed over streams");
    fact(dl, "Kernels", M.fmt.duration(v("kernel_ns")) + " (" + M.fmt.percent(v("kernel_ns"), busy) + ")");
    fact(dl, "Copies", "HtoD " + M.fmt.duration(v("memcpy_htod_ns")) + ", DtoH " + M.fmt.duration(v("memcpy_dtoh_ns")) +
      ", DtoD " + M.fmt.duration(v("memcpy_dtod_ns")) + "; " + M.fmt.bytes(v("copy_bytes")) + " moved");
    fact(dl, "Memset", M.fmt.duration(v("memset_ns")) + ", " + M.fmt.bytes(v("memset_bytes")));
    if (v("sync_ns")) fact(dl, "Synchronization", M.fmt.duration(v("sync_ns")), "time CPU threads waited in CUDA synchronization calls");
    fact(dl, "Launches", String(v("launches")) + (v("unjoined") ? " (" + v("unjoined") + " GPU operations without a seen launch)" : ""));
    if (v("dropped") || v("cupti_dropped"))
      fact(dl, "Lost", v("dropped") + " GPU events in mlprof, " + v("cupti_dropped") + " records dropped by CUPTI");
    fact(dl, "CUPTI", "version " + g.cupti_version + ", clock " + g.clock);
    host.appendChild(dl);

    host.appendChild(M.el("h3", { text: "Kernels" }));
    const kHost = M.el("div", { cls: "table-host" });
    host.appendChild(kHost);
    const total = v("kernel_ns");
    new M.SortableTable(kHost, [
      { title: "total", cls: "num", key: function (k) { return k.total_ns; }, text: function (k) { return M.fmt.duration(k.total_ns); },
        pct: function (k) { return total ? (100 * k.total_ns) / total : 0; } },
      { title: "%", cls: "num", key: function (k) { return k.total_ns; }, text: function (k) { return M.fmt.percent(k.total_ns, total); } },
      { title: "calls", cls: "num", key: function (k) { return k.calls; }, text: function (k) { return String(k.calls); } },
      { title: "mean", cls: "num", key: function (k) { return k.mean_ns; }, text: function (k) { return M.fmt.duration(k.mean_ns); } },
      { title: "max", cls: "num", key: function (k) { return k.max_ns; }, text: function (k) { return M.fmt.duration(k.max_ns); } },
      { title: "grid / block", cls: "num", key: function (k) { return k.grid.join("x"); }, text: function (k) { return k.grid.join("x") + " / " + k.block.join("x"); } },
      // Template-heavy names (PyTorch's distribution kernels: 3,000 characters) are clipped to
      // four lines; the whole name is the cell's tooltip.
      { title: "kernel", cls: "name", key: function (k) { return k.name.toLowerCase(); }, text: function (k) { return k.name; },
        cell: function (k, td) { td.setAttribute("title", k.name); td.appendChild(M.el("div", { cls: "clip", text: k.name })); } },
      { title: "launched from", cls: "loc", key: function (k) { return where(k.launched_from && k.launched_from.launch); },
        text: function (k) { return where(k.launched_from && k.launched_from.launch); } },
    ], g.kernels || [], { sortIndex: 0, descending: true, showAll: false }).render();

    (g.devices || []).forEach(function (d) {
      const rel = function (pts, scale) {
        return pts.map(function (p) { return [p[0] - data.run.start_ns, p[1] * scale]; });
      };
      if (d.utilization_permille.length)
        M.charts.timeline(host, {
          title: "GPU " + d.device + " utilization (" + M.fmt.duration(d.bucket_ns) + " buckets; a kernel running)",
          series: [{ name: "busy", unit: "%", points: rel(d.utilization_permille, 0.1) }],
          yMax: 100, step: true, xMax: data.timelines && data.timelines.duration_ns,
        });
      if (d.memory_bytes.length)
        M.charts.timeline(host, {
          title: "GPU " + d.device + " memory allocated through CUDA (peak " + M.fmt.bytes(d.peak_memory_bytes) + ")",
          series: [{ name: "device memory", unit: "bytes", points: rel(d.memory_bytes, 1) }],
          step: true, xMax: data.timelines && data.timelines.duration_ns,
        });
      if ((d.peak_holders || []).length) {
        host.appendChild(M.el("h3", { text: "GPU " + d.device + ": allocations live at the device-memory peak" }));
        host.appendChild(M.el("ul", {}, d.peak_holders.map(function (h) {
          return M.el("li", { text: M.fmt.bytes(h.bytes) + " \u2014 " + where(h.allocated_from && h.allocated_from.launch) });
        })));
      }
    });
    host.appendChild(M.el("p", { cls: "note", text: g.memory_note }));
  }

  function render(host, data) {
    data.gpu.forEach(function (g) {
      if (data.gpu.length > 1) host.appendChild(M.el("h3", { text: "Process " + g.pid }));
      renderProcess(host, data, g);
    });
    M.test.gpu = { processes: data.gpu.length, kernels: data.gpu.reduce(function (a, g) { return a + (g.kernels || []).length; }, 0) };
  }

  M.sections.push({ id: "gpu", title: "GPU", order: 8, render: render, when: function (d) { return Array.isArray(d.gpu) && d.gpu.length > 0; } });
})();
