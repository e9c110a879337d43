// Live update of the incident list: every 5 s, fetch the server-rendered rows
// (already escaped by the server) and swap them in. Without JavaScript the
// page is the same list, current as of its load.
(function () {
  "use strict";
  var body = document.getElementById("incident-rows");
  var stamp = document.getElementById("updated");
  if (!body) { return; }
  var source = body.getAttribute("data-source");
  function refresh() {
    fetch(source, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) { throw new Error(r.status); }
      return r.text();
    }).then(function (html) {
      body.innerHTML = html;
      if (stamp) { stamp.textContent = "updated " + new Date().toLocaleTimeString(); }
    }).catch(function () {
      if (stamp) { stamp.textContent = "live update failed; retrying"; }
    });
  }
  setInterval(refresh, 5000);
})();
