// Live progress: ask for the page's version (its newest event id) every 2 s; reload on change.
// A static file, not an inline script: the console's Content-Security-Policy runs only its own
// files (api/headers.py). A refresh that is not answered with JSON (the session ended, so it
// was sent to the sign-in page) reloads too, and the page then asks to sign in.
(() => {
  const url = document.body.dataset.pollUrl;
  const seen = document.body.dataset.pollVersion;
  if (!url) return;
  const tick = async () => {
    try {
      const res = await fetch(url, { headers: { Accept: "application/json" } });
      const json = (res.headers.get("content-type") || "").includes("application/json");
      if (res.redirected || !json) return location.reload();
      if (res.ok && String((await res.json()).version) !== seen) return location.reload();
    } catch (_) { /* the server is restarting: try again */ }
    setTimeout(tick, 2000);
  };
  setTimeout(tick, 2000);
})();
