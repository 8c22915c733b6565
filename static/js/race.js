// A race's page: one socket per lane on the run's own /ws/runs/<id>/ (the run consumer
// already checks who may watch and resumes after drops), and whenever a lane says
// something changed, the scoreboard and the aligned lanes are fetched again
// (/races/<id>/lanes/): the server re-aligns every lane by expected action each time.
(() => {
  const root = document.getElementById("race");
  if (!root) return;
  const url = root.dataset.lanesUrl;
  const indicator = document.getElementById("race-live-indicator");
  const runIds = root.dataset.runs.split(",").filter(Boolean);
  const lanes = new Map(runIds.map((id) => [id, { lastSeq: -1, final: false }]));
  let fetching = false;
  let again = false;
  let timer = null;
  let refreshes = 0;

  function done() {
    return [...lanes.values()].every((lane) => lane.final);
  }

  function show() {
    indicator.textContent = done() ? "" : "Live…";
  }

  async function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    try {
      const response = await fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" });
      if (response.ok) {
        const t = document.createElement("template");
        t.innerHTML = (await response.text()).trim();
        const next = t.content.firstElementChild;
        document.getElementById("race-live").replaceWith(next);
        refreshes += 1;
        root.dataset.refreshes = String(refreshes);
      }
    } finally {
      fetching = false;
      if (again) { again = false; schedule(); }
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 150);
  }

  // A lane's socket resumes after the last seq it saw and needs none once its run is final.
  function follow(runId) {
    const lane = lanes.get(runId);
    window.LiveSocket.open({
      path: () => `/ws/runs/${runId}/?after=${lane.lastSeq}`,
      done: () => lane.final,
      onMessage: (data) => {
        if (data.type === "event" && data.seq > lane.lastSeq) {
          lane.lastSeq = data.seq;
          schedule();
        } else if (data.type === "status") {
          schedule();
          if (data.final) {
            lane.final = true;
            show();
          }
        }
      },
      watchdog: true,
    });
  }

  if (document.getElementById("race-live").dataset.done === "true") return;
  show();
  for (const id of runIds) follow(id);
})();
