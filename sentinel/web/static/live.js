// Live update of the incident lists ("Open now" and "History", each a tbody with a
// data-source): every 5 s, fetch the server-rendered rows (already escaped by the
// server) and fold them into the table. Without JavaScript the page is the same
// lists, current as of its load.
//
// Rows are matched by their incident link and only what changed is replaced (a
// ticking duration replaces its cell, not the row): a link an on-call engineer is
// about to click, or has keyboard focus on, stays the same node across updates.
(function () {
  "use strict";
  var bodies = Array.prototype.slice.call(document.querySelectorAll("tbody[data-source]"));
  var stamp = document.getElementById("updated");
  if (!bodies.length) { return; }

  function key(tr) {
    var link = tr.querySelector("a[href]");
    return link ? link.getAttribute("href") : "text:" + tr.textContent;
  }

  // Bring a kept row up to date cell by cell; a row of another shape is replaced whole.
  function patch(kept, fresh) {
    if (kept.innerHTML === fresh.innerHTML) { return; }
    if (kept.cells.length !== fresh.cells.length) { kept.innerHTML = fresh.innerHTML; return; }
    for (var i = 0; i < fresh.cells.length; i++) {
      if (kept.cells[i].outerHTML !== fresh.cells[i].outerHTML) {
        kept.replaceChild(fresh.cells[i].cloneNode(true), kept.cells[i]);
      }
    }
  }

  function fold(body, html) {
    var incoming = document.createElement("tbody");
    incoming.innerHTML = html;
    var old = {};
    Array.prototype.forEach.call(body.rows, function (tr) { old[key(tr)] = tr; });
    Array.prototype.slice.call(incoming.rows).forEach(function (fresh, at) {
      var row = old[key(fresh)];
      if (row) {
        delete old[key(fresh)];
        patch(row, fresh);
      } else {
        row = fresh;
      }
      if (body.rows[at] !== row) { body.insertBefore(row, body.rows[at] || null); }
    });
    Object.keys(old).forEach(function (k) { body.removeChild(old[k]); });
  }

  function update(body) {
    return fetch(body.getAttribute("data-source"), { credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) { throw new Error(r.status); }
        return r.text();
      }).then(function (html) { fold(body, html); });
  }

  function refresh() {
    Promise.all(bodies.map(update)).then(function () {
      if (stamp) { stamp.textContent = "updated " + new Date().toLocaleTimeString(); }
    }).catch(function () {
      if (stamp) { stamp.textContent = "live update failed; retrying"; }
    });
  }
  setInterval(refresh, 5000);
})();
