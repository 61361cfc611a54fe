// mlprof HTML report: the Timelines section (data.timelines, bucketed in report/html_timeline.cpp):
// CPU cores used over time (all processes, then the busiest processes) against the CPUs the run
// could use, and per process RSS and estimated live heap.
(function () {
  "use strict";
  const M = window.MLPROF;

  function render(host, data) {
    const tl = data.timelines || {};
    const cpu = tl.cpu || [], mem = tl.memory || [];
    if (!cpu.length && !mem.length) {
      host.appendChild(M.el("p", { cls: "note", text: "No samples or memory timeline in this profile." }));
      return;
    }
    if (cpu.length) {
      const series = cpu.map(function (s) { return { name: s.label + " (cores)", unit: "cores", points: s.points }; });
      const refs = tl.cpus ? [{ value: tl.cpus, label: tl.cpus + " CPUs available" }] : [];
      M.charts.timeline(host, {
        title: "CPU cores used (" + M.fmt.duration(tl.bucket_ns || 0) + " buckets)",
        series: series, refLines: refs, xMax: tl.duration_ns, step: true,
      });
    }
    mem.forEach(function (m) {
      M.charts.timeline(host, {
        title: "Memory of " + m.label,
        series: [
          { name: "RSS", unit: "bytes", points: m.rss },
          { name: "live heap (estimated)", unit: "bytes", points: m.heap },
        ],
        xMax: tl.duration_ns,
      });
    });
  }

  M.sections.push({ id: "timelines", title: "Timelines", order: 10, render: render,
                    when: function (d) { return d.timelines && ((d.timelines.cpu || []).length || (d.timelines.memory || []).length); } });
})();
