// The live run page: events over /ws/runs/<id>/?after=<last seq>, resuming after drops.
(() => {
  const root = document.getElementById("run");
  if (!root) return;
  const runId = root.dataset.runId;
  const events = document.getElementById("events");
  const live = document.getElementById("live-indicator");
  let lastSeq = parseInt(root.dataset.lastSeq, 10);
  let final = root.dataset.final === "true";

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  function show(data) {
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
      }
    }
  }

  // The elapsed time ticks between status updates while the run is going.
  setInterval(() => {
    const el = document.querySelector("#run-status .elapsed");
    if (!el || el.dataset.finished || !el.dataset.started) return;
    const seconds = Math.max(0, (Date.now() - Date.parse(el.dataset.started)) / 1000);
    el.textContent = `${Math.round(seconds)} s`;
  }, 1000);

  window.tau2Run = { get lastSeq() { return lastSeq; } };
  // A reopened socket asks for what came after lastSeq (no gap) and show() skips any
  // seq it has shown already (no duplicate).
  window.LiveSocket.open({
    path: () => `/ws/runs/${runId}/?after=${lastSeq}`,
    done: () => final,
    onMessage: show,
    onOpen: () => { live.textContent = "Live…"; },
    onDrop: () => { live.textContent = "Reconnecting…"; },
    watchdog: true,
  });
})();
