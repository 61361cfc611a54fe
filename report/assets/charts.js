// mlprof HTML report: charts on <canvas> (a small, stable API for every section; docs/report.md).
//
//   MLPROF.charts.timeline(host, {
//     series: [{name, unit, points: [[t_ns, value], ...], color?}],  // t_ns from the run's start
//     height?: 180, yMin?: 0, yMax?: number, refLines?: [{value, label}],
//     xMax?: ns (default: the last point), title?: text, step?: true (bucketed values),
//     marks?: [{t_ns, label}] (vertical dashed lines: events such as "ready") })
//   MLPROF.charts.histogram(host, {values: [..] | bins: [{lo, hi, count}], unit, bins?: 30,
//     height?: 160, title?, logX?: false})
//   MLPROF.charts.strip(canvas, values0to100, {color?})      // tiny per-thread activity strip
//
// Each returns {redraw()} (timeline/histogram redraw on resize). Series with different units get
// the first unit's axis; pass one unit per chart. Hovering shows a vertical rule and the value of
// every series at that time; the legend lists the series. All text is drawn with fillText or set
// with textContent.
(function () {
  "use strict";
  const M = window.MLPROF;
  const palette = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777"];

  function css(name, fallback) {
    const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return v || fallback;
  }

  // A canvas sized to its host's width at the device's pixel ratio.
  function makeCanvas(host, height) {
    const canvas = M.el("canvas", { cls: "chart" });
    host.appendChild(canvas);
    function size() {
      const w = Math.max(200, host.clientWidth || 600);
      return { ctx: M.sizeCanvas(canvas, w, height), w: w, h: height };
    }
    return { canvas: canvas, size: size };
  }

  // 1-2-5 ticks covering [lo, hi].
  function ticks(lo, hi, n) {
    const span = hi - lo || 1;
    const raw = span / n;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(function (k) { return k * mag; }).find(function (s) { return s >= raw; });
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(t);
    return out;
  }
  function byteTicks(hi, n) {
    // Powers of two friendly ticks for bytes.
    let unit = 1;
    while (hi / unit >= 1024) unit *= 1024;
    return ticks(0, hi / unit, n).map(function (t) { return t * unit; });
  }

  function timeline(host, opt) {
    const height = opt.height || 180;
    const series = opt.series.filter(function (s) { return s.points && s.points.length; });
    const unit = series.length ? series[0].unit : "";
    const wrap = M.el("div", { cls: "chart-wrap" });
    if (opt.title) wrap.appendChild(M.el("div", { cls: "chart-title", text: opt.title }));
    host.appendChild(wrap);
    if (!series.length) {
      wrap.appendChild(M.el("p", { cls: "note", text: "No data." }));
      return { redraw: function () {} };
    }
    const c = makeCanvas(wrap, height);
    const tip = M.el("div", { cls: "tooltip chart-tip", attrs: { role: "status" } });
    tip.hidden = true;
    wrap.appendChild(tip);
    const legend = M.el("div", { cls: "legend" });
    series.forEach(function (s, i) {
      s.color = s.color || palette[i % palette.length];
      const sw = M.el("span", { cls: "swatch" });
      sw.style.background = s.color;
      legend.appendChild(M.el("span", { cls: "legend-item" }, [sw, M.el("span", { text: s.name })]));
    });
    wrap.appendChild(legend);
    let xMax = opt.xMax || 0, yMax = opt.yMax || 0;
    series.forEach(function (s) {
      s.points.forEach(function (p) {
        if (!opt.xMax && p[0] > xMax) xMax = p[0];
        if (opt.yMax === undefined && p[1] > yMax) yMax = p[1];
      });
    });
    (opt.refLines || []).forEach(function (r) { if (opt.yMax === undefined && r.value > yMax) yMax = r.value; });
    if (!(yMax > 0)) yMax = 1;
    if (!(xMax > 0)) xMax = 1;
    const pad = { l: 64, r: 12, t: 8, b: 24 };
    let geom = null;

    function draw(hoverX) {
      const g = c.size();
      geom = g;
      const ctx = g.ctx, W = g.w - pad.l - pad.r, H = g.h - pad.t - pad.b;
      const fg = css("--muted", "#666"), grid = css("--border", "#ddd");
      ctx.clearRect(0, 0, g.w, g.h);
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillStyle = fg;
      ctx.strokeStyle = grid;
      ctx.lineWidth = 1;
      const yt = unit === "bytes" ? byteTicks(yMax, 4) : ticks(0, yMax, 4);
      const top = Math.max(yMax * 1.1, yt[yt.length - 1] || yMax); // headroom for reference labels
      const X = function (t) { return pad.l + (t / xMax) * W; };
      const Y = function (v) { return pad.t + H - (v / top) * H; };
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      yt.forEach(function (v) {
        ctx.beginPath();
        ctx.moveTo(pad.l, Math.round(Y(v)) + 0.5);
        ctx.lineTo(pad.l + W, Math.round(Y(v)) + 0.5);
        ctx.stroke();
        ctx.fillText(M.fmt.value(v, unit), pad.l - 6, Y(v));
      });
      ctx.textAlign = "center";
      ctx.textBaseline = "top";
      ticks(0, xMax / 1e9, 8).forEach(function (s) {
        const x = X(s * 1e9);
        ctx.fillText(s === 0 ? "0" : M.fmt.duration(s * 1e9), x, pad.t + H + 6);
      });
      (opt.refLines || []).forEach(function (r) {
        ctx.save();
        ctx.setLineDash([4, 4]);
        ctx.strokeStyle = fg;
        ctx.beginPath();
        ctx.moveTo(pad.l, Y(r.value));
        ctx.lineTo(pad.l + W, Y(r.value));
        ctx.stroke();
        ctx.restore();
        ctx.textAlign = "left";
        ctx.textBaseline = "bottom";
        ctx.fillText(r.label, pad.l + 4, Y(r.value) - 2);
      });
      (opt.marks || []).forEach(function (m, i) {
        if (!(m.t_ns >= 0) || m.t_ns > xMax) return;
        const x = Math.round(X(m.t_ns)) + 0.5;
        ctx.save();
        ctx.setLineDash([2, 3]);
        ctx.strokeStyle = fg;
        ctx.beginPath();
        ctx.moveTo(x, pad.t);
        ctx.lineTo(x, pad.t + H);
        ctx.stroke();
        ctx.restore();
        ctx.textAlign = "left";
        ctx.textBaseline = "top";
        ctx.fillText(m.label, x + 3, pad.t + 2 + 12 * i);
      });
      series.forEach(function (s) {
        ctx.strokeStyle = s.color;
        ctx.lineWidth = 1.5;
        ctx.beginPath();
        s.points.forEach(function (p, i) {
          const x = X(p[0]), y = Y(p[1]);
          if (i === 0) ctx.moveTo(x, y);
          else if (opt.step) { ctx.lineTo(x, Y(s.points[i - 1][1])); ctx.lineTo(x, y); }
          else ctx.lineTo(x, y);
        });
        ctx.stroke();
      });
      if (hoverX !== undefined) {
        ctx.strokeStyle = fg;
        ctx.lineWidth = 1;
        ctx.beginPath();
        ctx.moveTo(Math.round(hoverX) + 0.5, pad.t);
        ctx.lineTo(Math.round(hoverX) + 0.5, pad.t + H);
        ctx.stroke();
      }
    }

    function nearest(points, t) {
      let lo = 0, hi = points.length - 1;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (points[mid][0] < t) lo = mid + 1;
        else hi = mid;
      }
      if (lo > 0 && Math.abs(points[lo - 1][0] - t) < Math.abs(points[lo][0] - t)) lo -= 1;
      return points[lo];
    }

    c.canvas.addEventListener("mousemove", function (ev) {
      if (!geom) return;
      const r = c.canvas.getBoundingClientRect();
      const x = ev.clientX - r.left;
      const W = geom.w - pad.l - pad.r;
      if (x < pad.l || x > pad.l + W) { tip.hidden = true; draw(); return; }
      const t = ((x - pad.l) / W) * xMax;
      draw(x);
      const rows = [M.el("div", { cls: "tip-title", text: "t = " + M.fmt.duration(t) })];
      series.forEach(function (s) {
        const p = nearest(s.points, t);
        const sw = M.el("span", { cls: "swatch" });
        sw.style.background = s.color;
        rows.push(M.el("div", {}, [sw, M.el("span", { text: s.name + ": " + M.fmt.value(p[1], s.unit) })]));
      });
      tip.replaceChildren.apply(tip, rows);
      tip.hidden = false;
      tip.style.left = Math.min(x + 12, geom.w - 180) + "px";
      tip.style.top = "24px";
    });
    c.canvas.addEventListener("mouseleave", function () { tip.hidden = true; draw(); });
    draw();
    window.addEventListener("resize", function () { draw(); });
    return { redraw: function () { draw(); }, canvas: c.canvas };
  }

  function histogram(host, opt) {
    const height = opt.height || 160;
    const wrap = M.el("div", { cls: "chart-wrap" });
    if (opt.title) wrap.appendChild(M.el("div", { cls: "chart-title", text: opt.title }));
    host.appendChild(wrap);
    let bins = opt.bins && typeof opt.bins === "object" ? opt.bins : null;
    if (!bins) {
      const vals = opt.values || [];
      if (!vals.length) {
        wrap.appendChild(M.el("p", { cls: "note", text: "No data." }));
        return { redraw: function () {} };
      }
      const n = typeof opt.bins === "number" ? opt.bins : 30;
      let lo = Infinity, hi = -Infinity;
      vals.forEach(function (v) { if (v < lo) lo = v; if (v > hi) hi = v; });
      if (hi === lo) hi = lo + 1;
      const w = (hi - lo) / n;
      bins = [];
      for (let i = 0; i < n; i++) bins.push({ lo: lo + i * w, hi: lo + (i + 1) * w, count: 0 });
      vals.forEach(function (v) { bins[Math.min(n - 1, Math.floor((v - lo) / w))].count += 1; });
    }
    const c = makeCanvas(wrap, height);
    const tip = M.el("div", { cls: "tooltip chart-tip", attrs: { role: "status" } });
    tip.hidden = true;
    wrap.appendChild(tip);
    const pad = { l: 48, r: 12, t: 8, b: 24 };
    let geom = null;
    const maxCount = Math.max.apply(null, bins.map(function (b) { return b.count; }).concat([1]));
    function draw(hover) {
      const g = c.size();
      geom = g;
      const ctx = g.ctx, W = g.w - pad.l - pad.r, H = g.h - pad.t - pad.b;
      ctx.clearRect(0, 0, g.w, g.h);
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillStyle = css("--muted", "#666");
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      ticks(0, maxCount, 3).forEach(function (v) { ctx.fillText(M.fmt.count(v), pad.l - 6, pad.t + H - (v / maxCount) * H); });
      const bw = W / bins.length;
      bins.forEach(function (b, i) {
        ctx.fillStyle = i === hover ? css("--accent", "#c2410c") : "#2563eb";
        const h = (b.count / maxCount) * H;
        ctx.fillRect(pad.l + i * bw + 1, pad.t + H - h, Math.max(1, bw - 2), h);
      });
      ctx.fillStyle = css("--muted", "#666");
      ctx.textAlign = "center";
      ctx.textBaseline = "top";
      const step = Math.max(1, Math.ceil(bins.length / 6));
      for (let i = 0; i < bins.length; i += step) ctx.fillText(M.fmt.value(bins[i].lo, opt.unit), pad.l + i * bw, pad.t + H + 6);
    }
    c.canvas.addEventListener("mousemove", function (ev) {
      if (!geom) return;
      const r = c.canvas.getBoundingClientRect();
      const i = Math.floor(((ev.clientX - r.left - pad.l) / (geom.w - pad.l - pad.r)) * bins.length);
      if (i < 0 || i >= bins.length) { tip.hidden = true; draw(); return; }
      draw(i);
      const b = bins[i];
      tip.textContent = M.fmt.value(b.lo, opt.unit) + " \u2013 " + M.fmt.value(b.hi, opt.unit) + ": " + b.count;
      tip.hidden = false;
      tip.style.left = Math.min(ev.clientX - r.left + 12, geom.w - 180) + "px";
      tip.style.top = "24px";
    });
    c.canvas.addEventListener("mouseleave", function () { tip.hidden = true; draw(); });
    draw();
    window.addEventListener("resize", function () { draw(); });
    return { redraw: function () { draw(); }, canvas: c.canvas };
  }

  // values: 0..100 per bucket; drawn as bars of a fixed-size canvas (no axis).
  function strip(canvas, values, opt) {
    const w = canvas.width = values.length * 2, h = canvas.height = 14;
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = (opt && opt.color) || "#2563eb";
    values.forEach(function (v, i) {
      if (v <= 0) return;
      const bh = Math.max(1, (v / 100) * h);
      ctx.fillRect(i * 2, h - bh, 2, bh);
    });
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    return canvas;
  }

  M.charts = { timeline: timeline, histogram: histogram, strip: strip, palette: palette };
})();
