// The entropy page's chart: a step's figures in the readout, its token and band highlighted (lab.views.kinds.entropy).
(function () {
  "use strict";
  var chart = document.getElementById("entropy-chart");
  var data = JSON.parse(document.getElementById("entropy-chart-data").textContent);
  var readout = document.getElementById("entropy-readout");
  var cursor = document.getElementById("entropy-cursor");
  var byStep = {};
  data.forEach(function (d) { byStep[d.step] = d; });
  function show(step) {
    var d = byStep[step];
    if (!d) return;
    readout.textContent = "step " + d.step + ": “" + d.text + "”  ·  entropy " + d.h + " bits  ·  varentropy " +
      d.v + " bits²  ·  p(chosen) " + d.p;
    cursor.setAttribute("x1", d.x); cursor.setAttribute("x2", d.x); cursor.setAttribute("visibility", "visible");
    document.querySelectorAll(".tok.hl, #entropy-chart .band.on").forEach(function (e) { e.classList.remove("hl", "on"); });
    var tok = document.getElementById("tok-" + step);
    if (tok) tok.classList.add("hl");
    var band = chart.querySelector('.band[data-step="' + step + '"]');
    if (band) band.classList.add("on");
  }
  chart.querySelectorAll(".band").forEach(function (b) {
    var step = b.getAttribute("data-step");
    b.addEventListener("mouseenter", function () { show(step); });
    b.addEventListener("focus", function () { show(step); });
  });
  document.querySelectorAll("#entropy-tokens .tok").forEach(function (t) {
    var step = t.getAttribute("data-step");
    t.addEventListener("mouseenter", function () { show(step); });
    t.addEventListener("focus", function () { show(step); });
  });
})();
