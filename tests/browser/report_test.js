// Browser tests of the mlprof HTML report in real headless Chromium, driven by playwright-core
// (installed into the build directory by tests/browser/setup.sh). One case per run:
//   node report_test.js CASE --html FILE --artifacts DIR [--hot-file F --hot-line N --hot-function NAME]
// CASE: python | native | memory | inject | wall | multiproc | large. Exits 0 when every check passes, 1 otherwise
// (each failed check is printed). "large" also prints {"load_ms", "search_ms", ...} as JSON.
"use strict";
const path = require("path");
const fs = require("fs");

function parseArgs(argv) {
  const out = { case: argv[0] };
  for (let i = 1; i < argv.length; i += 2) out[argv[i].replace(/^--/, "").replace(/-/g, "_")] = argv[i + 1];
  return out;
}
const args = parseArgs(process.argv.slice(2));
const nodeDir = process.env.MLPROF_BROWSER_NODE_DIR;
let chromium;
try {
  chromium = require(path.resolve(nodeDir || ".", "node_modules", "playwright-core")).chromium;
} catch (e) {
  console.error("playwright-core is not installed in " + nodeDir + " (run tests/browser/setup.sh): " + e.message);
  process.exit(1);
}
const executable = process.env.MLPROF_CHROMIUM || (fs.existsSync("/usr/lib/chromium/chromium") ? "/usr/lib/chromium/chromium" : "/usr/bin/chromium");

const failures = [];
function check(ok, what) {
  console.log((ok ? "ok   " : "FAIL ") + what);
  if (!ok) failures.push(what);
}

async function main() {
  const browser = await chromium.launch({ executablePath: executable, args: ["--no-sandbox", "--disable-gpu"] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const consoleErrors = [], failedRequests = [], otherRequests = [], dialogs = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push("page error: " + e.message));
  page.on("requestfailed", (r) => failedRequests.push(r.url()));
  page.on("request", (r) => { if (!r.url().startsWith("file://")) otherRequests.push(r.url()); });
  page.on("dialog", async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  await page.addInitScript(() => { window.mlprofCanary = "intact"; });

  const url = "file://" + path.resolve(args.html);
  const t0 = Date.now();
  await page.goto(url, { waitUntil: "load" });
  await page.waitForSelector("body[data-ready='1']", { timeout: 60000 });
  const loadMs = Date.now() - t0;
  console.log("loaded in " + loadMs + " ms");

  const artifacts = args.artifacts;
  fs.mkdirSync(artifacts, { recursive: true });
  async function screenshots() {
    const ids = await page.$$eval("main > section, #sections > section", (s) => s.map((e) => e.id).filter(Boolean));
    for (const id of ids) {
      const el = await page.$("#" + id);
      await el.screenshot({ path: path.join(artifacts, args.case + "-" + id + ".png") });
    }
    await page.screenshot({ path: path.join(artifacts, args.case + "-page.png"), fullPage: false });
    check(ids.length >= 3, "screenshots of " + ids.length + " sections saved in " + artifacts + " (" + ids.join(", ") + ")");
  }

  const flameDrawn = () => page.$eval("canvas.flame", (c) => Number(c.dataset.drawn || 0));
  const flameMatched = () => page.$eval("canvas.flame", (c) => Number(c.dataset.matched || 0));
  const flamePixels = () => page.$eval("canvas.flame", (c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n;
  });
  async function search(text) {
    await page.fill("#flame-search", text);
    await page.waitForFunction((t) => {
      const c = document.querySelector("canvas.flame");
      const m = document.getElementById("flame-match");
      return c.dataset.matched !== "" && m.textContent.indexOf(t) >= 0;
    }, text, { timeout: 10000 });
    return flameMatched();
  }

  // ---- checks common to every report ----
  check(await page.$("#summary dl.facts") !== null, "static summary present");
  check(await page.$("#flame canvas.flame") !== null, "flame graph section present");
  const metrics = await page.$$eval("#flame-metric option", (o) => o.map((x) => ({ value: x.value, text: x.textContent })));
  check(metrics.length >= 1, "flame metric selector lists " + metrics.length + " metrics");
  for (const m of metrics) {
    await page.selectOption("#flame-metric", m.value);
    const drawn = await flameDrawn();
    const px = await flamePixels();
    check(drawn > 1 && px > 1000, "flame graph draws for metric " + m.text + " (" + drawn + " boxes, " + px + " pixels)");
  }
  if (metrics.length) await page.selectOption("#flame-metric", metrics[0].value);
  check((await search("zzqx-no-such-function-qxzz")) === 0, "search for a nonsense string matches nothing");
  await page.fill("#flame-search", "");

  if (args.case === "python" || args.case === "native") {
    const n = await search(args.hot_function);
    const pct = await page.$eval("canvas.flame", (c) => Number(c.dataset.matchedPct));
    const text = await page.$eval("#flame-match", (e) => e.textContent);
    check(n > 0 && pct > 20, "search '" + args.hot_function + "' highlights " + n + " boxes, " + pct.toFixed(1) + "% (" + text + ")");
    await page.fill("#flame-search", "");
    // Source view: the hot file first, its hottest line the known one, and first when sorted.
    const first = await page.$eval("#source details.src-file", (d) => d.dataset.path);
    check(first === args.hot_file, "source view lists " + args.hot_file + " first (got " + first + ")");
    const hottest = await page.$eval("#source details.src-file tr.hottest", (r) => Number(r.dataset.line));
    check(hottest === Number(args.hot_line), "source view's hottest line is " + args.hot_line + " (got " + hottest + ")");
    await page.click("#source details.src-file table.source thead th:nth-child(2) button");
    const firstRow = await page.$eval("#source details.src-file table.source tbody tr", (r) => Number(r.dataset.line));
    check(firstRow === Number(args.hot_line), "sorted by its first metric, the source view shows line " + args.hot_line + " first (got " + firstRow + ")");
    const hotText = await page.$eval("#source details.src-file tr.hottest td.code", (e) => e.textContent);
    check(hotText.indexOf(args.hot_marker) >= 0, "the hot line's text is shown (" + hotText.trim() + ")");
    // A line links to its stacks: clicking its number highlights frames in the flame graph.
    await page.click("#source details.src-file tr.hottest button.lineno");
    await page.waitForFunction(() => document.querySelector("canvas.flame").dataset.matched !== "");
    check((await flameMatched()) > 0, "clicking the hot line highlights " + (await flameMatched()) + " boxes in the flame graph");
    // Hints name the hot line first.
    const hint = await page.$eval("#hints li", (e) => e.textContent);
    check(hint.indexOf(path.basename(args.hot_file) + ":" + args.hot_line) >= 0, "first hint names the hot line (" + hint + ")");
    await page.click("#source details.src-file table.source thead th:nth-child(1) button");
  }
  if (args.case === "python") {
    // Per-thread selection: the worker thread's own tree.
    const trees = await page.$$eval("#flame-tree option", (o) => o.map((x) => ({ value: x.value, text: x.textContent })));
    check(trees.length >= 3, "thread selector offers " + trees.length + " trees (all + threads)");
    const threadTrees = trees.filter((t) => t.text.startsWith("thread "));
    let sawWorker = false;
    for (const t of threadTrees) {
      await page.selectOption("#flame-tree", t.value);
      const drawn = await flameDrawn();
      const status = await page.$eval(".flame-status", (e) => e.textContent);
      check(drawn > 1 && status.indexOf(t.text) >= 0, "thread tree '" + t.text + "' draws " + drawn + " boxes");
      const n = await search("worker_loop");
      sawWorker = sawWorker || n > 0;
      await page.fill("#flame-search", "");
    }
    check(sawWorker, "one thread's tree holds worker_loop");
    await page.selectOption("#flame-tree", trees[0].value);
    // Inverted view draws too.
    await page.selectOption("#flame-view", "inverted");
    check((await flameDrawn()) > 1, "inverted view draws");
    await page.selectOption("#flame-view", "flame");
    check(await page.$("#timelines canvas.chart") !== null, "CPU timeline chart present");
    const strips = await page.$$eval("#processes td.strip canvas", (c) => c.length);
    check(strips >= 2, "thread activity strips drawn (" + strips + ")");
  }
  if (args.case === "native") {
    check(!metrics.some((m) => /alloc|live|copy/.test(m.text)), "CPU-only profile offers no memory metric");
    check(await page.$("#leaks") === null, "CPU-only profile has no leak section");
  }
  if (args.case === "memory") {
    check(metrics.some((m) => /alloc-bytes/.test(m.text)), "memory profile offers alloc-bytes in the flame graph");
    const rows = await page.$$eval("#leaks-table tbody tr", (r) => r.length);
    check(rows >= 1, "leak candidates table lists " + rows + " rows");
    const charts = await page.$$eval("#timelines .chart-title", (t) => t.map((x) => x.textContent));
    check(charts.some((t) => t.startsWith("Memory of")), "memory timeline chart present (" + charts.join("; ") + ")");
    const cols = await page.$$eval("#source details.src-file table.source thead th", (t) => t.map((x) => x.textContent));
    check(cols.some((c) => /allocated/.test(c)), "source view has an allocated column (" + cols.join(", ") + ")");
  }
  if (args.case === "multiproc") {
    // The parent and its two fork children: a process tree, per-process flame graphs, one with child_work.
    const nested = await page.$$eval("#processes ul.tree > li > ul > li", (l) => l.length);
    check(nested >= 2, "process tree nests " + nested + " children under the parent");
    const trees = await page.$$eval("#flame-tree option", (o) => o.map((x) => ({ value: x.value, text: x.textContent })));
    const procTrees = trees.filter((t) => t.text.startsWith("process "));
    check(procTrees.length >= 3, "flame graph offers " + procTrees.length + " per-process trees");
    let withChild = 0;
    for (const t of procTrees) {
      await page.selectOption("#flame-tree", t.value);
      if ((await search("child_work")) > 0) withChild += 1;
      await page.fill("#flame-search", "");
    }
    check(withChild === 2, "child_work is in exactly the two children's trees (" + withChild + ")");
    await page.selectOption("#flame-tree", trees[0].value);
    const series = await page.$$eval("#timelines .legend-item", (l) => l.length);
    check(series >= 3, "CPU timeline has a series per process (" + series + " legend items)");
  }
  if (args.case === "wall") {
    check(metrics.some((m) => /\(wait\)/.test(m.text)), "wall-mode profile offers the wait metric");
    const cols = await page.$$eval("#source details.src-file table.source thead th", (t) => t.map((x) => x.textContent));
    check(cols.some((c) => /waiting/.test(c)), "source view has a waiting column (" + cols.join(", ") + ")");
  }
  if (args.case === "python") {
    // The charts API other sections build on (docs/report.md): a histogram with hover.
    const ok = await page.evaluate(() => {
      const host = document.createElement("div");
      host.id = "histogram-probe";
      document.getElementById("sections").appendChild(host);
      window.MLPROF.charts.histogram(host, { values: [1, 2, 2, 3, 3, 3, 10], unit: "ms", title: "probe" });
      return host.querySelectorAll("canvas.chart").length;
    });
    check(ok === 1, "MLPROF.charts.histogram draws a chart");
  }
  if (args.case === "inject") {
    const evil = "<img src=x onerror=alert(1)></script><script>window.__pwned=1</script>";
    const bodyText = await page.$eval("body", (b) => b.textContent);
    check(bodyText.indexOf(evil) >= 0, "the hostile file/function name is shown as literal text");
    const cells = await page.$$eval("#functions-table td.name", (t) => t.map((x) => x.textContent));
    check(cells.some((c) => c === evil), "functions table cell's textContent is exactly the hostile name");
    check((await page.$$eval("img", (i) => i.length)) === 0, "no <img> element exists");
    check((await page.$$eval("script", (s) => s.length)) === 2, "only the page's own two <script> elements exist");
    check(dialogs.length === 0, "no dialog opened (" + dialogs.join(",") + ")");
    check((await page.evaluate(() => window.__pwned)) === undefined, "injected script did not run");
    check((await page.evaluate(() => window.mlprofCanary)) === "intact", "canary untouched");
    check((await search("onerror")) > 0, "flame search finds the hostile function name");
    // Hover the flame graph everywhere: tooltips are text too.
    const box = await (await page.$("canvas.flame")).boundingBox();
    for (let x = box.x + 5; x < box.x + box.width; x += 97) await page.mouse.move(x, box.y + box.height - 5);
    check((await page.$$eval("img", (i) => i.length)) === 0 && dialogs.length === 0, "tooltips insert no markup");
  }
  if (args.case === "serving") {
    // mlprof-run --requests against the native test server (run_case.sh): 300 requests, every
    // 10th failing, 10000 bytes kept per request.
    check(await page.$("#serving") !== null, "serving section present");
    const facts = await page.$eval("#serving dl.facts", (d) => d.textContent);
    check(facts.indexOf("270 of 300 succeeded") >= 0 && facts.indexOf("successRate 0.900") >= 0,
          "serving facts show 270 of 300 succeeded, successRate 0.900 (" + facts.replace(/\s+/g, " ").slice(0, 200) + ")");
    check(/Recommended CPU/.test(facts) && /Recommended memory/.test(facts), "the recommendation is shown");
    const probe = await page.evaluate(() => window.MLPROF.test.serving);
    check(probe && probe.requests === Number(args.requests) && probe.answered === 300 && probe.steady === 280 &&
          probe.histogram_total === 280 && probe.buckets >= 10 && probe.buckets <= 120,
          "every request is counted in the page's bucketed series, every steady-state answered one (HTTP 500 included) in the histogram (" + JSON.stringify(probe) + ")");
    check(/Start-up/.test(facts), "the start-up time is shown");
    const titles = await page.$$eval("#serving .chart-title", (t) => t.map((x) => x.textContent));
    check(titles.some((t) => /Latency over/.test(t)) && titles.some((t) => /histogram/.test(t)) &&
          titles.some((t) => /Throughput/.test(t)) && titles.some((t) => /Service memory/.test(t)),
          "latency, histogram, throughput and memory charts drawn (" + titles.join("; ") + ")");
    const charts = await page.$$eval("#serving canvas.chart", (c) => c.length);
    check(charts >= 4, charts + " serving charts");
    const sites = await page.$$eval("#serving table.data", (t) => t.length);
    check(sites === 2, "per-request tables for lines and allocation sites (" + sites + ")");
    const retained = await page.$$eval("#serving table.data:nth-of-type(1) tbody tr", (r) => r.length);
    check(retained >= 1, "per-request tables have rows");
    // The sites table, most retained first: the leak (10000 B a request: at 16K each block is
    // sampled with probability ~0.46, ~130 sampled blocks over the window, a standard error of
    // ~7%; the bounds are +-40%) leads with its figure; sites on too few sampled blocks read "~0",
    // with the note. (The estimate's accuracy is Serving.RetainedBytesPerRequest*'s to check.)
    const cells = await page.$$eval("#serving table.data", (t) =>
      Array.from(t[1].querySelectorAll("tbody tr")).map((r) => r.cells[0].textContent.trim()));
    const lead = /^([\d.]+) KiB$/.exec(cells[0] || "");
    check(lead !== null && Number(lead[1]) * 1024 > 6000 && Number(lead[1]) * 1024 < 14000,
          "the leak leads the sites table at ~10000 B retained a request (" + cells.slice(0, 3).join(", ") + ")");
    const note = await page.$$eval("#serving p.note", (p) => p.map((x) => x.textContent).join(" "));
    check(!cells.includes("~0") || /fewer than 3 sampled blocks/.test(note),
          "a ~0 retained figure comes with its note (" + note.slice(0, 120) + ")");
  }
  if (args.case === "gpu") {
    // The fake-CUDA fixture: kernels, copies in each direction and memsets at known lines.
    check(metrics.some((m) => /\(gpu\)/.test(m.text)), "the flame graph offers the gpu metric");
    check(await page.$("#gpu") !== null, "GPU section present");
    const probe = await page.evaluate(() => window.MLPROF.test.gpu);
    check(probe && probe.kernels >= 2, "kernel table data (" + JSON.stringify(probe) + ")");
    const kernels = await page.$$eval("#gpu table.data tbody tr td.name", (t) => t.map((x) => x.textContent));
    check(kernels.length >= 2, "kernel table lists " + kernels.length + " kernels (" + kernels.join(", ") + ")");
    const from = await page.$$eval("#gpu table.data tbody tr td.loc", (t) => t.map((x) => x.textContent));
    check(from.some((f) => /gpu_app\.cpp:\d+/.test(f)), "kernels name their launching line (" + from.join("; ") + ")");
    const titles = await page.$$eval("#gpu .chart-title", (t) => t.map((x) => x.textContent));
    check(titles.some((t) => /utilization/.test(t)) && titles.some((t) => /memory/.test(t)),
          "utilization and device-memory charts drawn (" + titles.join("; ") + ")");
    const cols = await page.$$eval("#source details.src-file table.source thead th", (t) => t.map((x) => x.textContent));
    check(cols.some((c) => /GPU/.test(c)), "source view has a GPU column (" + cols.join(", ") + ")");
  }
  if (args.case === "large") {
    const t1 = Date.now();
    await search("fn_17");
    const searchMs = Date.now() - t1;
    const t2 = Date.now();
    if (metrics.length > 1) await page.selectOption("#flame-metric", metrics[1].value);
    const metricMs = Date.now() - t2;
    const t3 = Date.now();
    await page.selectOption("#flame-view", "inverted");
    const invertMs = Date.now() - t3;
    const size = fs.statSync(args.html).size;
    console.log(JSON.stringify({ load_ms: loadMs, search_ms: searchMs, metric_switch_ms: metricMs, inverted_ms: invertMs, html_bytes: size }));
    check(loadMs < 10000, "large report loads and draws in " + loadMs + " ms");
  }

  await screenshots();
  check(consoleErrors.length === 0, "zero console errors" + (consoleErrors.length ? ": " + consoleErrors.join(" | ") : ""));
  check(failedRequests.length === 0, "zero failed requests" + (failedRequests.length ? ": " + failedRequests.join(" ") : ""));
  check(otherRequests.length === 0, "no request leaves file:// (" + otherRequests.join(" ") + ")");
  await browser.close();
}

main().then(
  () => {
    if (failures.length) {
      console.error(failures.length + " check(s) failed");
      process.exit(1);
    }
    console.log("all checks passed");
  },
  (e) => {
    console.error("FAIL " + (e && e.stack ? e.stack : e));
    process.exit(1);
  }
);
