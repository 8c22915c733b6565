// The banner saying that no worker is alive (templates/includes/worker_banner.html): the
// live pages ask /health/workers every 10 s and show or hide it by the answer, without a
// reload. The server words the message (its time zone), as on the page's first render.
(() => {
  const banner = document.getElementById("worker-banner");
  if (!banner) return;
  const url = banner.dataset.url;
  const PERIOD_MS = 10000;
  let timer = null;
  let asking = false;

  async function check() {
    timer = null;
    asking = true;
    try {
      const response = await fetch(url, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      });
      // 200: a worker is alive; 503: none is. Anything else — a web server restarting,
      // or a 503 saying the database is away (no "alive" in it) — says nothing about the
      // workers: the banner stays as it is.
      if (response.status === 200 || response.status === 503) {
        const state = await response.json();
        if (typeof state.alive === "boolean") {
          banner.textContent = state.message;
          banner.hidden = state.alive;
        }
      }
    } catch (error) {
      // Offline: the page's socket says so; ask again next time.
    } finally {
      asking = false;
      schedule();
    }
  }

  function schedule() {
    // A hidden tab asks nothing; it asks at once when shown again.
    if (timer === null && !document.hidden) timer = setTimeout(check, PERIOD_MS);
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && timer === null && !asking) check();
  });
  schedule();
})();
