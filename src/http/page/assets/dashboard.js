// settle: the provider dashboard follows its live stream (Server-Sent Events) and swaps in
// the fresh panel after each update: of the ledger (`summary`, by its id) or of the GPUs'
// reliability reports (`reliability`, by its mark). No token here: the browser sends the
// HttpOnly cookie.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!main || !live || !main.dataset.stream || !window.EventSource) { return; }
  var shown = main.dataset.position;
  var mark = main.dataset.reportsMark;
  var loading = false;
  var again = false;

  function refresh() {
    if (loading) { again = true; return; }
    loading = true;
    fetch(main.dataset.panel, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) { if (html) { live.innerHTML = html; } })
      .catch(function () {})
      .then(function () {
        loading = false;
        if (again) { again = false; refresh(); }
      });
  }

  var stream = null;
  function connect() {
    stream = new EventSource(main.dataset.stream, { withCredentials: true });
    stream.addEventListener("open", function () { status.textContent = status.dataset.live; });
    stream.addEventListener("summary", function (e) {
      status.textContent = status.dataset.live;
      if (e.lastEventId !== shown) { shown = e.lastEventId; refresh(); }
    });
    stream.addEventListener("reliability", function (e) {
      var data;
      try { data = JSON.parse(e.data); } catch (err) { return; }
      if (data.reports_mark !== mark) { mark = data.reports_mark; refresh(); }
    });
    stream.addEventListener("error", function () {
      status.textContent = status.dataset.reconnecting;
    });
  }
  connect();
  // A page left for another may be kept in the back-forward cache: its stream would stay
  // open there and hold one of the token's few streams. Closed on leaving, opened again
  // (summary and mark compared as above) when the page is shown again.
  window.addEventListener("pagehide", function () {
    if (stream) { stream.close(); stream = null; }
  });
  window.addEventListener("pageshow", function (e) {
    if (e.persisted && !stream) { connect(); }
  });
})();
