// Live progress without reloading the page. A page with `data-stream-url` follows the console's
// event stream (api/ui/live.py: the API's server-sent events behind the session cookie, so no
// token reaches this script); on a message it fetches the page again and swaps its live region
// (#live-region) in place, keeping open <details> open and leaving a field being typed in alone.
// EventSource reconnects by itself after a dropped connection, resuming after Last-Event-ID.
// A page with only `data-poll-url` (the runs list), or whose stream was refused for good (the
// session ended: it was sent to the sign-in page), asks for the page's version (its newest event
// id) every 2 s instead and swaps on change. An answer that is not the page or JSON (signed out)
// reloads, and the page then asks to sign in. A static file, not an inline script: the
// console's Content-Security-Policy runs only its own files (api/headers.py).
(() => {
  const body = document.body;
  const pollUrl = body.dataset.pollUrl;
  const streamUrl = body.dataset.streamUrl;
  if (!pollUrl && !streamUrl) return;
  const POLL_MS = 2000, SETTLE_MS = 100, TYPING_RETRY_MS = 1000;
  let version = body.dataset.pollVersion;
  let source = null, pollTimer = null, pending = null, busy = false, again = false, stopped = false;

  const stop = () => {
    stopped = true;
    if (source) source.close();
    clearTimeout(pollTimer);
  };
  const typing = () => {
    const el = document.activeElement;
    return el && el.closest("#live-region") && el.matches("input, textarea, select");
  };
  const keepOpen = (here, next) => {
    const open = new Set([...here.querySelectorAll("details[open] > summary")].map((s) => s.textContent));
    next.querySelectorAll("details > summary").forEach((s) => {
      if (open.has(s.textContent)) s.parentElement.open = true;
    });
  };

  const swap = async () => {
    const res = await fetch(location.href, { headers: { Accept: "text/html" } });
    if (res.redirected || !res.ok) return location.reload();
    const next = new DOMParser().parseFromString(await res.text(), "text/html");
    const here = document.getElementById("live-region");
    const region = next.getElementById("live-region");
    if (!here || !region) return location.reload();
    keepOpen(here, region);
    here.replaceWith(document.adoptNode(region));
    version = next.body.dataset.pollVersion;
    body.dataset.pollVersion = version || "";
    body.dataset.refreshed = String(Number(body.dataset.refreshed || 0) + 1);
    if (!next.body.dataset.pollUrl) stop(); // the run ended: nothing more will change
  };

  const refresh = async () => {
    pending = null;
    if (busy) { again = true; return; }
    if (typing()) { pending = setTimeout(refresh, TYPING_RETRY_MS); return; }
    busy = true;
    try { await swap(); } catch (_) { again = true; } // the server is restarting: try again
    busy = false;
    if (again && !stopped) { again = false; pending = setTimeout(refresh, POLL_MS); }
  };
  const schedule = () => { if (!pending && !stopped) pending = setTimeout(refresh, SETTLE_MS); };

  const poll = async () => {
    body.dataset.live = "poll";
    try {
      const res = await fetch(pollUrl, { headers: { Accept: "application/json" } });
      const json = (res.headers.get("content-type") || "").includes("application/json");
      if (res.redirected || !json) return location.reload();
      if (res.ok && String((await res.json()).version) !== String(version)) schedule();
    } catch (_) { /* the server is restarting: try again */ }
    if (!stopped) pollTimer = setTimeout(poll, POLL_MS);
  };

  const follow = () => {
    source = new EventSource(streamUrl);
    source.onopen = () => { body.dataset.live = "stream"; };
    source.addEventListener("timeline", schedule);
    source.addEventListener("end", () => { source.close(); schedule(); });
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED && !stopped && pollUrl) poll();
    };
  };

  if (streamUrl) follow();
  else pollTimer = setTimeout(poll, POLL_MS);
})();
