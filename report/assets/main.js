// mlprof HTML report, last module: renders the hints and every registered section in order
// (MLPROF.sections: {id, title, order, when?(data), render(el, data)}), and the navigation bar.
// A section that throws is replaced by an error note (and reported on the console); the others
// still render.
(function () {
  "use strict";
  const M = window.MLPROF;
  const host = document.getElementById("sections");
  const nav = document.getElementById("nav");
  const links = [M.el("a", { text: "Summary", attrs: { href: "#summary" } })];
  try {
    M.renderHints();
  } catch (e) {
    console.error("mlprof report: hints failed", e);
  }
  M.sections
    .slice()
    .sort(function (a, b) { return (a.order || 100) - (b.order || 100); })
    .forEach(function (s) {
      if (s.when && !s.when(M.data)) return;
      const body = M.el("div", { cls: "section-body" });
      const section = M.el("section", { attrs: { id: s.id } }, [M.el("h2", { text: s.title }), body]);
      host.appendChild(section);
      links.push(M.el("a", { text: s.title, attrs: { href: "#" + s.id } }));
      try {
        s.render(body, M.data);
      } catch (e) {
        console.error("mlprof report: section " + s.id + " failed", e);
        body.replaceChildren(M.el("p", { cls: "note error", text: "This section could not be drawn: " + e }));
      }
    });
  nav.replaceChildren.apply(nav, links);
  // Table headers stick just below the sticky page header.
  const header = document.querySelector("header");
  const setHeaderHeight = function () {
    document.documentElement.style.setProperty("--header-h", (header ? header.offsetHeight : 0) + "px");
  };
  setHeaderHeight();
  window.addEventListener("resize", setHeaderHeight);
  document.body.dataset.ready = "1";
})();
