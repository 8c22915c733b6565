// The live run page: events over /ws/runs/<id>/?after=<last seq>, resuming after drops.
(() => {
  const root = document.getElementById("run");
  if (!root) return;
  const runId = root.dataset.runId;
  const events = document.getElementById("events");
  const live = document.getElementById("live-indicator");
  let lastSeq = parseInt(root.dataset.lastSeq, 10);
  let final = root.dataset.final === "true";
  let retry = 0;

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  function connect() {
    if (final) return;
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}/ws/runs/${runId}/?after=${lastSeq}`);
    // A quiet socket may have missed a message (e.g. the final status while Redis was
    // busy): reopen it after a while; the server resends what came after lastSeq.
    let watchdog;
    const arm = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => { if (!final) ws.close(); }, 30000);
    };
    ws.onopen = () => { retry = 0; live.textContent = "Live…"; arm(); };
    ws.onmessage = (msg) => {
      arm();
      const data = JSON.parse(msg.data);
      if (data.type === "event" && data.seq > lastSeq) {
        events.appendChild(fragment(data.html));
        lastSeq = data.seq;
        root.dataset.lastSeq = String(lastSeq);
        window.scrollTo({ top: document.body.scrollHeight, behavior: "smooth" });
      } else if (data.type === "status") {
        const current = document.getElementById("run-status");
        const next = fragment(data.html);
        current.replaceWith(next);
        if (window.htmx) window.htmx.process(next);
        if (data.final) {
          final = true;
          root.dataset.final = "true";
          live.textContent = "";
          ws.close();
        }
      }
    };
    ws.onclose = () => {
      clearTimeout(watchdog);
      if (final) return;
      live.textContent = "Reconnecting…";
      retry = Math.min(retry + 1, 6);
      setTimeout(connect, 250 * 2 ** retry);
    };
  }
  // The elapsed time ticks between status updates while the run is going.
  setInterval(() => {
    const el = document.querySelector("#run-status .elapsed");
    if (!el || el.dataset.finished || !el.dataset.started) return;
    const seconds = Math.max(0, (Date.now() - Date.parse(el.dataset.started)) / 1000);
    el.textContent = `${Math.round(seconds)} s`;
  }, 1000);

  window.tau2Run = { get lastSeq() { return lastSeq; } };
  connect();
})();
