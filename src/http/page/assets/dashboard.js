// settle: the provider dashboard follows its live stream (Server-Sent Events) and swaps in
// the fresh panel after each update. No token here: the browser sends the HttpOnly cookie.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!main || !live || !main.dataset.stream || !window.EventSource) { return; }
  var shown = main.dataset.position;
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

  var stream = new EventSource(main.dataset.stream, { withCredentials: true });
  stream.addEventListener("open", function () { status.textContent = status.dataset.live; });
  stream.addEventListener("summary", function (e) {
    status.textContent = status.dataset.live;
    if (e.lastEventId !== shown) { shown = e.lastEventId; refresh(); }
  });
  stream.addEventListener("error", function () {
    status.textContent = status.dataset.reconnecting;
  });
})();
