// riskrank console: the only script. On the approvals page it asks the server every few
// seconds which requests are pending and reloads the page when that set changes, unless the
// operator has started typing a note (a reload would lose it). Nothing else runs here.
(function () {
  "use strict";
  if (document.body.dataset.page !== "approvals") return;
  var counter = document.getElementById("pending-count");
  if (!counter) return;
  var shown = counter.dataset.ids || "";
  function typing() {
    var notes = document.querySelectorAll("textarea[name=note]");
    for (var i = 0; i < notes.length; i++) {
      if (notes[i].value || document.activeElement === notes[i]) return true;
    }
    return false;
  }
  function poll() {
    fetch(window.location.pathname.replace(/\/approvals$/, "/api/pending"), {credentials: "same-origin", cache: "no-store"})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (body && body.pending.join(" ") !== shown && !typing()) window.location.reload();
      })
      .catch(function () {});
  }
  window.setInterval(poll, 3000);
})();
