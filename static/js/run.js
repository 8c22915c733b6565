// The live run page: events over /ws/runs/<id>/?after=<last seq>, resuming after drops;
// once the run ends, the page's body as a reload shows it; each message's menu.
(() => {
  const root = document.getElementById("run");
  if (!root) return;
  const runId = root.dataset.runId;
  const events = document.getElementById("events");
  const live = document.getElementById("live-indicator");
  let lastSeq = parseInt(root.dataset.lastSeq, 10);
  let final = root.dataset.final === "true";
  const loadedEnded = final;
  let ended = null; // the fetch of the ended run's body, once asked

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  // "Copy link" copies the message's address (actions.js copies the input's value): made
  // whole here, since the server renders a message without knowing the host it is seen on.
  function absolutise(within) {
    for (const input of within.querySelectorAll("input[data-absolute-url]")) {
      input.value = new URL(input.value, location.href).href;
    }
  }

  // The run ended: its diagnosis, badges, fork links and review forms come from the server
  // in one piece (the page's own template, ?part=body), so the page is what a reload shows,
  // with any event the socket missed. htmx swaps it in (and runs the scripts it brings, as
  // the reviewer picker's); a label form being filled in is put back as it was.
  function showEnded() {
    if (ended) return ended;
    if (!window.htmx) { // htmx loads deferred: the status came first
      document.addEventListener("DOMContentLoaded", showEnded, { once: true });
      return null;
    }
    const url = new URL(location.pathname, location.href);
    url.searchParams.set("part", "body");
    const kept = Array.from(document.querySelectorAll("#events .review-slot:has(details[open])"));
    ended = window.htmx
      .ajax("GET", url.pathname + url.search, { source: root, target: "#run-page", swap: "outerHTML" })
      .then(() => {
        for (const slot of kept) {
          const twin = document.getElementById(slot.id);
          if (twin && twin !== slot) twin.replaceWith(slot);
        }
        absolutise(document);
      });
    return ended;
  }

  let call = null; // the LLM call in flight, as the socket told it (static/js/call_line.js)
  function tickCall() {
    if (call && !final) live.textContent = window.CallLine.words(call);
  }

  function show(data) {
    if (data.type === "event" && data.seq > lastSeq) {
      const node = fragment(data.html);
      absolutise(node);
      events.appendChild(node);
      lastSeq = data.seq;
      root.dataset.lastSeq = String(lastSeq);
      window.scrollTo({ top: document.body.scrollHeight, behavior: "smooth" });
    } else if (data.type === "call" && !final) {
      // One of the run's LLM calls started or ended: a passing line, ticking while it waits.
      // A retry says why the last attempt failed and which one is under way now.
      call = window.CallLine.from(data);
      live.textContent = call ? "" : window.CallLine.ended(data) || "Live…";
      tickCall();
    } else if (data.type === "status") {
      const current = document.getElementById("run-status");
      const next = fragment(data.html);
      current.replaceWith(next);
      if (window.htmx) window.htmx.process(next);
      if (data.final) {
        final = true;
        root.dataset.final = "true";
        live.textContent = "";
        showEnded();
      }
    }
  }

  // A message's menu: "Label message N" opens that message's label form (its slot sits
  // right after it); Escape or a click elsewhere closes an open menu.
  function closeMenus(except) {
    for (const menu of document.querySelectorAll("details.message-menu[open]")) {
      if (menu !== except) menu.open = false;
    }
  }

  document.addEventListener("click", (event) => {
    const label = event.target.closest("[data-label-seq]");
    if (label) {
      const form = document.querySelector(`#review-${label.dataset.labelSeq} details.review-add`);
      if (form) {
        event.preventDefault();
        form.open = !form.open;
        closeMenus();
        if (form.open) {
          const first = form.querySelector("select, textarea, input:not([type=hidden])");
          if (first) first.focus();
        }
      }
      return;
    }
    closeMenus(event.target.closest("details.message-menu"));
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    const open = event.target.closest && event.target.closest("details.message-menu[open]");
    closeMenus();
    if (open) open.querySelector("summary").focus();
  });

  // The elapsed time ticks between status updates while the run is going.
  setInterval(() => {
    tickCall();
    const el = document.querySelector("#run-status .elapsed");
    if (!el || el.dataset.finished || !el.dataset.started) return;
    const seconds = Math.max(0, (Date.now() - Date.parse(el.dataset.started)) / 1000);
    el.textContent = `${Math.round(seconds)} s`;
    // And how long Stop has waited for the call in flight.
    const waits = document.querySelector("#run-status [data-testid=stop-waits][data-since] .since");
    if (waits) {
      const since = Date.parse(waits.parentElement.dataset.since);
      waits.textContent = `${Math.round(Math.max(0, (Date.now() - since) / 1000))} s`;
    }
  }, 1000);

  absolutise(document);
  window.tau2Run = {
    get lastSeq() { return lastSeq; },
    // Settles once an ended run's body is in (at once when the page was loaded ended);
    // null until the page asked for it.
    get ended() { return loadedEnded ? Promise.resolve() : ended; },
  };
  // A reopened socket asks for what came after lastSeq (no gap) and show() skips any
  // seq it has shown already (no duplicate).
  window.LiveSocket.open({
    path: () => `/ws/runs/${runId}/?after=${lastSeq}&menu=1&calls=1`,
    done: () => final,
    onMessage: show,
    onOpen: () => { live.textContent = "Live…"; },
    onDrop: () => { live.textContent = "Reconnecting…"; },
    watchdog: true,
  });
})();
