// eve-search dashboard: sortable and filterable tables, and live reload when served.
// No external code: this file is embedded in the page, which must open offline.
(function () {
  "use strict";

  function cellValue(row, column, numeric) {
    var cell = row.cells[column];
    if (!cell) { return numeric ? NaN : ""; }
    var raw = cell.getAttribute("data-value");
    if (numeric) { return raw === null || raw === "" ? NaN : Number(raw); }
    return (raw !== null ? raw : cell.textContent).toLowerCase();
  }

  function sortTable(table, column, header) {
    var numeric = header.getAttribute("data-numeric") === "1";
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, column, numeric), y = cellValue(b, column, numeric);
      var order;
      if (numeric) {
        // Missing values sort last in both directions.
        if (isNaN(x) || isNaN(y)) { return (isNaN(x) ? 1 : 0) - (isNaN(y) ? 1 : 0); }
        order = x - y;
      } else {
        order = x < y ? -1 : (x > y ? 1 : 0);
      }
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  function makeSortable(table) {
    if (!table.tHead || !table.tBodies.length) { return; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, column) {
      th.setAttribute("tabindex", "0");
      th.setAttribute("title", "sort by " + th.textContent);
      th.addEventListener("click", function () { sortTable(table, column, th); });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sortTable(table, column, th); }
      });
    });
  }

  function attachFilter(input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    var counter = document.getElementById(input.getAttribute("data-counter"));
    if (!table) { return; }
    function apply() {
      var terms = input.value.toLowerCase().split(/\s+/).filter(function (t) { return t.length > 0; });
      var shown = 0, rows = table.tBodies[0].rows;
      Array.prototype.forEach.call(rows, function (row) {
        var text = row.textContent.toLowerCase();
        var keep = terms.every(function (term) { return text.indexOf(term) !== -1; });
        row.hidden = !keep;
        if (keep) { shown += 1; }
      });
      if (counter) { counter.textContent = shown + " of " + rows.length + " rows"; }
    }
    input.addEventListener("input", apply);
    apply();
  }

  function startLive() {
    var body = document.body;
    if (body.getAttribute("data-live") !== "1" || location.protocol.indexOf("http") !== 0) { return; }
    var status = document.getElementById("live-status");
    var seconds = Number(body.getAttribute("data-interval")) || 5;
    var current = body.getAttribute("data-fingerprint");
    status.hidden = false;
    status.textContent = "live: checking the store every " + seconds + " s";
    // The next check is scheduled when this one ends, so a slow store never piles up requests.
    function poll() {
      fetch("data.json", { cache: "no-store" }).then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      }).then(function (data) {
        if (data.fingerprint !== current) { location.reload(); return; }
        status.className = "live-status";
        status.textContent = "live: up to date at " + new Date().toLocaleTimeString();
        setTimeout(poll, seconds * 1000);
      }).catch(function (error) {
        status.className = "live-status stale";
        status.textContent = "live: cannot reach the server (" + error.message + "); retrying";
        setTimeout(poll, seconds * 1000);
      });
    }
    setTimeout(poll, seconds * 1000);
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), makeSortable);
  Array.prototype.forEach.call(document.querySelectorAll("input.table-filter"), attachFilter);
  startLive();
  document.body.setAttribute("data-ready", "1");
})();
