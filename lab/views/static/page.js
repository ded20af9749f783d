// The pages' one script: sortable tables, the log's filters, and a plotted point or linked row highlighted.
// Everything it touches is already in the HTML; without script the page reads the same, unsorted.
(function () {
  "use strict";
  function cellValue(row, i) {
    var cell = row.children[i];
    var text = cell ? cell.getAttribute("data-sort") || cell.textContent.trim() : "";
    // A number only when the whole cell is one (a date "2026-12-05 02:38" is text, and sorts as text).
    return /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(text) ? parseFloat(text) : text.toLowerCase();
  }
  function sortBy(table, index, th) {
    var body = table.tBodies[0];
    if (!body) return;
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index), y = cellValue(b, index);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    if (!table.tHead) return;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(table, i, th); });
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") sortBy(table, i, th); });
    });
  });
  // Filters: <select data-filter="kind"> hides rows whose data-kind differs.
  var selects = document.querySelectorAll("select[data-filter]");
  function applyFilters() {
    document.querySelectorAll("tr[data-row]").forEach(function (row) {
      var shown = true;
      selects.forEach(function (s) { if (s.value && row.getAttribute("data-" + s.getAttribute("data-filter")) !== s.value) shown = false; });
      row.hidden = !shown;
    });
  }
  selects.forEach(function (s) { s.addEventListener("change", applyFilters); });
  // A link to a row (a plotted point's href="#id") marks the row it lands on.
  function markTarget() {
    document.querySelectorAll("tr.linked").forEach(function (r) { r.classList.remove("linked"); });
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (target && target.tagName === "TR") target.classList.add("linked");
    if (target && target.tagName === "DETAILS") target.open = true;  // a link to a round opens it
  }
  // A token's tooltip that would run past the window's right edge is anchored to the token's right instead.
  function place(e) {
    var tok = e.target.closest && e.target.closest(".tok");
    var tip = tok && tok.querySelector(".alts");
    if (!tip) return;
    tip.style.left = ""; tip.style.right = "";
    var box = tip.getBoundingClientRect();
    if (box.right > document.documentElement.clientWidth - 4) { tip.style.left = "auto"; tip.style.right = "0"; }
  }
  document.addEventListener("mouseover", place);
  document.addEventListener("focusin", place);
  window.addEventListener("hashchange", markTarget);
  markTarget();
})();
