// The training session page: draws the reward curve (each episode's reward and the moving
// average) with Chart.js (vendored under static/vendor/chartjs/) from the live part's
// data-chart, and again each time htmx swaps a fresh live part in (every few seconds).
(function () {
  "use strict";

  let chart = null;

  function readChart() {
    const holder = document.getElementById("training-data");
    if (!holder) return null;
    try {
      return JSON.parse(holder.dataset.chart || "null");
    } catch (error) {
      return null;
    }
  }

  function draw() {
    const data = readChart();
    const canvas = document.getElementById("reward-curve");
    if (!data || !canvas || !window.Chart) return;
    canvas.dataset.points = String(data.episodes.length);
    if (!chart) {
      chart = new window.Chart(canvas, {
        type: "line",
        data: {
          labels: data.episodes,
          datasets: [
            { label: "reward", data: data.rewards, showLine: false, pointRadius: 3, borderColor: "#2b7a4b", backgroundColor: "#2b7a4b" },
            { label: `moving average (last ${data.window})`, data: data.averages, pointRadius: 0, borderWidth: 2, borderColor: "#3b5bdb", backgroundColor: "#3b5bdb", tension: 0.2 },
          ],
        },
        options: {
          animation: false, maintainAspectRatio: false,
          scales: {
            x: { title: { display: true, text: "episode" } },
            y: { min: 0, max: 1, title: { display: true, text: "reward" } },
          },
        },
      });
      return;
    }
    chart.data.labels = data.episodes;
    chart.data.datasets[0].data = data.rewards;
    chart.data.datasets[1].data = data.averages;
    chart.update("none");
  }

  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target && event.detail.target.id === "training-live") draw();
  });
  draw();
  window.tau2Training = { get chart() { return chart; } };
})();
