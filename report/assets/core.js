// mlprof HTML report, module 1 of the page script (order: report/CMakeLists.txt): the MLPROF
// namespace, the embedded data, formatting, DOM helpers and the section registry.
//
// Safety rule for every module: text from the profiled program (symbols, paths, argv, thread
// names, source lines) reaches the page only through textContent, setAttribute or canvas
// fillText; never innerHTML, insertAdjacentHTML or document.write. MLPROF.el() is the helper
// that makes this the easy path.
(function () {
  "use strict";
  const M = (window.MLPROF = window.MLPROF || {});

  M.data = JSON.parse(document.getElementById("mlprof-data").textContent);

  // Section registry: {id, title, order, render(el, data)}; main.js renders them sorted by order.
  // Later work (serving, GPU) pushes its own sections here.
  M.sections = M.sections || [];

  // Hooks for the browser tests and for sections talking to each other (flame <-> source).
  M.test = M.test || {};

  // ---- formatting ----
  function duration(ns) {
    const a = Math.abs(ns);
    if (a >= 60e9) return (ns / 60e9).toFixed(1) + " min";
    if (a >= 1e9) return (ns / 1e9).toFixed(2) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(1) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(0) + " \u00b5s";
    return Math.round(ns) + " ns";
  }
  function bytes(v) {
    const units = ["KiB", "MiB", "GiB", "TiB"];
    if (Math.abs(v) < 1024) return Math.round(v) + " B";
    let u = -1;
    while (Math.abs(v) >= 1024 && u < units.length - 1) {
      v /= 1024;
      u += 1;
    }
    return v.toFixed(Math.abs(v) >= 100 ? 0 : 1) + " " + units[u];
  }
  function count(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    return String(Math.round(v * 100) / 100);
  }
  // A value in a metric's unit: "us" and "ns" are times, "bytes", "count", "cores", "%".
  function value(v, unit) {
    if (v === null || v === undefined || Number.isNaN(v)) return "-";
    if (unit === "us") return duration(v * 1000);
    if (unit === "ns") return duration(v);
    if (unit === "bytes") return bytes(v);
    if (unit === "cores") return v.toFixed(2);
    if (unit === "%") return v.toFixed(1) + "%";
    return count(v);
  }
  function percent(part, whole) {
    if (!whole) return "-";
    const p = (100 * part) / whole;
    return (p !== 0 && Math.abs(p) < 0.1 ? p.toFixed(2) : p.toFixed(1)) + "%";
  }
  M.fmt = { duration: duration, bytes: bytes, count: count, value: value, percent: percent };

  // Sizes a canvas to width x height CSS pixels at the device's pixel ratio; returns its 2D
  // context, scaled so that drawing is in CSS pixels.
  M.sizeCanvas = function (canvas, width, height) {
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  };

  M.basename = function (path) {
    const i = path.lastIndexOf("/");
    return i < 0 || i === path.length - 1 ? path : path.slice(i + 1);
  };

  // ---- DOM ----
  // el("td", {cls: "num", text: "12", title: "..", attrs: {..}, on: {click: fn}}, [children])
  M.el = function (tag, opts, children) {
    const e = document.createElement(tag);
    opts = opts || {};
    if (opts.text !== undefined && opts.text !== null) e.textContent = String(opts.text);
    if (opts.cls) e.className = opts.cls;
    if (opts.title) e.setAttribute("title", String(opts.title));
    if (opts.attrs) Object.keys(opts.attrs).forEach(function (k) { e.setAttribute(k, String(opts.attrs[k])); });
    if (opts.on) Object.keys(opts.on).forEach(function (k) { e.addEventListener(k, opts.on[k]); });
    (children || []).forEach(function (c) { if (c) e.appendChild(c); });
    return e;
  };
  M.button = function (text, onClick, cls) {
    const b = M.el("button", { text: text, cls: cls, on: { click: onClick } });
    b.type = "button";
    return b;
  };
  // A labelled <select>: options [{value, text}], returns {label, select}.
  M.select = function (id, label, options, selected, onChange) {
    const s = M.el("select", { attrs: { id: id } });
    options.forEach(function (o) {
      const opt = M.el("option", { text: o.text });
      opt.value = String(o.value);
      opt.selected = String(o.value) === String(selected);
      s.appendChild(opt);
    });
    s.addEventListener("change", function () { onChange(s.value); });
    const l = M.el("label", { text: label, attrs: { for: id } });
    return M.el("span", { cls: "control" }, [l, s]);
  };

  // ---- metrics ----
  M.metrics = M.data.metrics.map(function (m, i) { return { index: i, name: m.name, unit: m.unit, total: m.total }; });
  M.metricIndex = function (name) {
    for (let i = 0; i < M.metrics.length; i++) if (M.metrics[i].name === name) return i;
    return -1;
  };
  // Plain-language names for known metrics.
  const labels = {
    cpu: "CPU time", "cpu-interpreter": "CPU: Python", "cpu-native": "CPU: native", "cpu-system": "CPU: system",
    wall: "wall time", wait: "waiting", "alloc-bytes": "allocated", "alloc-count": "allocations",
    "live-peak-bytes": "live at peak", "live-end-bytes": "live at end", "copy-bytes": "copied", gpu: "GPU time",
  };
  M.metricLabel = function (m) { return labels[m.name] ? labels[m.name] + " (" + m.name + ")" : m.name; };
  M.metricShort = function (m) { return labels[m.name] || m.name; };

  // Frame kinds (profile/model.h FrameKind): colour family and legend name.
  M.kinds = [
    { name: "native", hue: 28 },
    { name: "Python", hue: 210 },
    { name: "kernel / system", hue: 350 },
    { name: "other", hue: 0, grey: true },
  ];

  // Small event bus between sections: M.on("highlight-line", fn); M.emit("highlight-line", {...}).
  const listeners = {};
  M.on = function (name, fn) { (listeners[name] = listeners[name] || []).push(fn); };
  M.emit = function (name, arg) { (listeners[name] || []).forEach(function (fn) { fn(arg); }); };

  M.scrollTo = function (id) {
    const e = document.getElementById(id);
    if (e && e.scrollIntoView) e.scrollIntoView({ block: "start" });
  };
})();
