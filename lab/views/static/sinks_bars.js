// The sinks page's bar chart: a bar's title shown in the readout on hover or focus (lab.views.kinds.sinks).
(function () {
  "use strict";
  var out = document.getElementById("sinks-readout");
  function show(e) {
    var bar = e.target.closest && e.target.closest("#sinks-bars g.bar");
    var title = bar && bar.querySelector("title");
    if (title) out.textContent = title.textContent;
  }
  var chart = document.getElementById("sinks-bars");
  if (chart) { chart.addEventListener("mouseover", show); chart.addEventListener("focusin", show); }
})();
