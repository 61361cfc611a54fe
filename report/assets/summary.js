// mlprof HTML report: "What to look at first" (data.hints, computed in report/html_hints.cpp),
// rendered into the summary section that the C++ side wrote (#hints). A hint with a place links
// to it: a source line opens the source view there, a function searches the flame graph.
(function () {
  "use strict";
  const M = window.MLPROF;

  function render() {
    const host = document.getElementById("hints");
    if (!host) return;
    const hints = M.data.hints || [];
    if (!hints.length) return;
    const list = M.el("ol", { cls: "hint-list" });
    hints.forEach(function (h) {
      const li = M.el("li", { cls: "hint " + (h.severity === "warn" ? "warn" : "info"), attrs: { "data-kind": h.kind } });
      li.appendChild(M.el("span", { cls: "hint-text", text: h.text }));
      if (h.file && h.line) {
        li.appendChild(M.button("show line", function () {
          M.emit("show-line", { file: h.file, line: h.line, function: h.function || "" });
        }, "link"));
      }
      if (h.function) {
        li.appendChild(M.button("find in flame graph", function () { M.emit("flame-search", h.function); }, "link"));
      }
      list.appendChild(li);
    });
    host.replaceChildren(M.el("h3", { text: "What to look at first" }), list);
  }

  M.renderHints = render;
})();
