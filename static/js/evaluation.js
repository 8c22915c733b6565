// The live evaluation page: its state over /ws/evaluations/<id>/?version=<n>, reconnecting
// with backoff; draws the results matrix (tasks × trials) and the two Chart.js plots from
// the JSON the server sends, and updates them in place.
(() => {
  const root = document.getElementById("evaluation");
  if (!root) return;
  const evaluationId = root.dataset.evaluationId;
  const runsUrl = root.dataset.runsUrl;
  const live = document.getElementById("live-indicator");
  const initial = JSON.parse(document.getElementById("evaluation-data").textContent);
  let version = parseInt(root.dataset.version, 10);
  let final = root.dataset.final === "true";

  // --- The matrix: one HTML string for thousands of cells, then patched cell by cell.
  const matrixBox = document.getElementById("matrix");
  let matrix = initial.matrix; // {k, tasks: [id…], cells: [[run id, status letter, reward] | null…]}
  let cellEls = [];
  let rowEls = [];
  const NAMES = { q: "queued", r: "running", c: "completed", f: "failed", s: "stopped" };
  const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const isSuccess = (reward) => reward !== null && reward >= 1 - 1e-6 && reward <= 1 + 1e-6;

  function cellClass(cell) {
    if (!cell) return "cell c-none";
    const [, letter, reward] = cell;
    if (letter !== "c") return `cell c-${letter}`;
    if (isSuccess(reward)) return "cell c-pass";
    return reward > 0 ? "cell c-mid" : "cell c-zero";
  }

  function cellLabel(cell) {
    if (!cell) return "";
    const [, letter, reward] = cell;
    if (letter === "c") return reward === null ? "–" : reward.toFixed(2);
    return { q: "", r: "…", f: "✕", s: "■" }[letter] || "";
  }

  function cellHtml(cell, task, trial) {
    if (!cell) return `<span class="cell c-none" data-testid="cell"></span>`;
    const [runId, letter, reward] = cell;
    const title = `${task} · trial ${trial + 1} · ${NAMES[letter] || letter}` +
      (letter === "c" && reward !== null ? ` · reward ${reward.toFixed(2)}` : "");
    const style = letter === "c" && reward !== null && !isSuccess(reward) && reward > 0
      ? ` style="--reward:${reward}"` : "";
    return `<a class="${cellClass(cell)}"${style} href="${runsUrl}${runId}/" data-testid="cell" ` +
      `data-status="${letter}" data-reward="${reward === null ? "" : reward}" ` +
      `title="${escape(title)}">${cellLabel(cell)}</a>`;
  }

  function rowSummary(row) {
    const k = matrix.k;
    let successes = 0, scored = 0;
    for (let t = 0; t < k; t++) {
      const cell = matrix.cells[row * k + t];
      if (cell && cell[1] === "c") { scored++; if (isSuccess(cell[2])) successes++; }
    }
    return scored ? `${successes}/${scored}` : "";
  }

  function drawMatrix() {
    const k = matrix.k;
    const head = ["<tr><th>Task</th>"];
    for (let t = 0; t < k; t++) head.push(`<th>${t + 1}</th>`);
    head.push('<th title="successes / scored trials">✓</th></tr>');
    const taskUrl = matrixBox.dataset.taskUrl || "";
    const rows = matrix.tasks.map((task, i) => {
      const cells = [];
      for (let t = 0; t < k; t++) cells.push(`<td>${cellHtml(matrix.cells[i * k + t], task, t)}</td>`);
      const link = taskUrl ? `<a href="${taskUrl}${encodeURIComponent(task)}/">${escape(task)}</a>` : escape(task);
      return `<tr data-task="${escape(task)}"><th class="task-cell">${link}</th>${cells.join("")}` +
        `<td class="row-summary">${rowSummary(i)}</td></tr>`;
    });
    matrixBox.innerHTML = `<table class="matrix-table"><thead>${head.join("")}</thead>` +
      `<tbody>${rows.join("")}</tbody></table>`;
    cellEls = Array.from(matrixBox.querySelectorAll('[data-testid="cell"]'));
    rowEls = Array.from(matrixBox.querySelectorAll(".row-summary"));
  }

  function patchMatrix(patch) {
    const k = matrix.k;
    const rows = new Set();
    for (const [index, cell] of patch) {
      matrix.cells[index] = cell;
      const row = Math.floor(index / k);
      const next = document.createElement("template");
      next.innerHTML = cellHtml(cell, matrix.tasks[row], index % k);
      const el = next.content.firstElementChild;
      cellEls[index].replaceWith(el);
      cellEls[index] = el;
      rows.add(row);
    }
    for (const row of rows) rowEls[row].textContent = rowSummary(row);
  }

  // --- The plots (Chart.js, vendored under static/vendor/chartjs/).
  let charts = initial.charts;
  let passChart = null;
  let rewardChart = null;

  function passData() {
    const values = new Map(charts.pass_hat_k.map(([k, v]) => [k, v]));
    const labels = Array.from({ length: charts.k }, (_, i) => i + 1);
    return { labels, values: labels.map((k) => (values.has(k) ? values.get(k) : null)) };
  }

  function rewardData() {
    return {
      labels: charts.reward_by_task.map(([i]) => matrix.tasks[i]),
      values: charts.reward_by_task.map(([, reward]) => reward),
    };
  }

  function drawCharts() {
    if (!window.Chart) return;
    const pass = passData();
    const rewards = rewardData();
    if (!passChart) {
      passChart = new window.Chart(document.getElementById("pass-k-chart"), {
        type: "line",
        data: { labels: pass.labels, datasets: [{ label: "pass^k", data: pass.values, borderColor: "#3b5bdb", backgroundColor: "#3b5bdb", spanGaps: false }] },
        options: {
          animation: false, maintainAspectRatio: false,
          scales: { x: { title: { display: true, text: "k" } }, y: { min: 0, max: 1, title: { display: true, text: "pass^k" } } },
          plugins: { legend: { display: false } },
        },
      });
      rewardChart = new window.Chart(document.getElementById("reward-chart"), {
        type: "bar",
        data: { labels: rewards.labels, datasets: [{ label: "mean reward", data: rewards.values, backgroundColor: "#2b7a4b", barPercentage: 1, categoryPercentage: 0.9 }] },
        options: {
          animation: false, maintainAspectRatio: false,
          scales: { x: { ticks: { display: rewards.labels.length <= 40 }, title: { display: true, text: "task" } }, y: { min: 0, max: 1, title: { display: true, text: "mean reward" } } },
          plugins: { legend: { display: false } },
        },
      });
      return;
    }
    passChart.data.labels = pass.labels;
    passChart.data.datasets[0].data = pass.values;
    passChart.update("none");
    rewardChart.data.labels = rewards.labels;
    rewardChart.data.datasets[0].data = rewards.values;
    rewardChart.options.scales.x.ticks.display = rewards.labels.length <= 40;
    rewardChart.update("none");
  }

  // --- A state from the socket (or /state/ while the socket is down).
  function replace(id, html) {
    const current = document.getElementById(id);
    const t = document.createElement("template");
    t.innerHTML = html.trim();
    if (current && t.content.firstElementChild) current.replaceWith(t.content.firstElementChild);
  }

  function apply(state) {
    version = state.version;
    root.dataset.version = String(version);
    root.dataset.status = state.status;
    root.dataset.retryable = String(state.retryable);
    replace("evaluation-progress", state.progress_html);
    replace("evaluation-metrics", state.metrics_html);
    if (state.breakdowns_html) replace("evaluation-breakdowns", state.breakdowns_html);
    tickEta();
    if (state.matrix) { matrix = state.matrix; drawMatrix(); }
    else if (state.patch && state.patch.length) patchMatrix(state.patch);
    charts = state.charts;
    drawCharts();
    if (state.final) {
      final = true;
      root.dataset.final = "true";
      live.textContent = "";
    }
  }

  // --- The ETA counts down between states from when it ends (`data-eta-at`, the runs'
  // real pace as the server read it), in the words presenters.duration_label uses.
  function durationLabel(seconds) {
    seconds = Math.round(seconds);
    if (seconds < 90) return `${seconds} s`;
    const minutes = Math.round(seconds / 60);
    if (minutes < 90) return `${minutes} min`;
    return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
  }

  function tickEta() {
    const eta = document.querySelector('[data-testid="eta"][data-eta-at]');
    if (!eta || !eta.dataset.etaAt) return;
    const left = (Date.parse(eta.dataset.etaAt) - Date.now()) / 1000;
    eta.textContent = left >= 1
      ? `about ${durationLabel(left)} left`
      : "taking longer than the runs' pace so far";
  }

  function catchUp() {
    fetch(root.dataset.stateUrl, { headers: { Accept: "application/json" } })
      .then((response) => (response.ok ? response.json() : null))
      .then((state) => { if (state) apply(state); })
      .catch(() => {});
  }

  drawMatrix();
  drawCharts();
  tickEta();
  setInterval(tickEta, 1000);
  window.tau2Evaluation = {
    get version() { return version; },
    get passChart() { return passChart; },
    get rewardChart() { return rewardChart; },
  };
  // On connect the server sends the whole state again, so a reopened socket misses nothing.
  window.LiveSocket.open({
    path: () => `/ws/evaluations/${evaluationId}/?version=${version}`,
    done: () => final,
    onMessage: (state) => { if (state.type === "state") apply(state); },
    onOpen: () => { live.textContent = "Live…"; },
    onDrop: (retry) => {
      live.textContent = "Reconnecting…";
      if (retry >= 3) catchUp(); // the socket keeps failing: read the state over HTTP meanwhile
    },
    watchdog: true,
  });
})();
