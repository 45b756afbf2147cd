// Calculator loader (a classic script, so that Material's instant navigation re-runs it on every
// page that embeds it). It mounts each <div class="calc-widget" data-calc="memory|pipeline|planner">
// once, importing only the modules that kind needs, from the folder this script was served from.
(function () {
  var me = document.currentScript && document.currentScript.src;
  if (!me) return;
  var base = me.slice(0, me.lastIndexOf("/") + 1);
  if (!document.querySelector('link[data-calc-css]')) {
    var css = document.createElement("link");
    css.rel = "stylesheet"; css.href = base + "calc.css"; css.setAttribute("data-calc-css", "");
    document.head.appendChild(css);
  }
  document.querySelectorAll(".calc-widget[data-calc]:not([data-mounted])").forEach(function (el) {
    el.setAttribute("data-mounted", "");
    import(base + el.getAttribute("data-calc") + "-ui.js").then(function (m) { m.mount(el); }, function (e) {
      el.textContent = "계산기를 불러오지 못했습니다: " + e.message;
      console.error(e);
    });
  });
})();
