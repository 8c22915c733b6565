// The run page, for reviewers: a message that arrives live (run.js appends it to #events)
// gets its review slot, the label form, as the messages present at load have theirs.
(() => {
  const root = document.getElementById("run");
  const events = document.getElementById("events");
  const url = root && root.dataset.reviewSlot;
  if (!url || !events) return;
  new MutationObserver((changes) => {
    for (const change of changes) {
      for (const node of change.addedNodes) {
        if (!(node instanceof HTMLElement) || !node.matches(".event[data-seq]")) continue;
        const seq = node.dataset.seq;
        if (!window.htmx || document.getElementById(`review-${seq}`)) continue;
        // Its own source: requests from one element (htmx's default, the body) queue
        // behind each other and keep only the last, so a batch of two lost one slot.
        window.htmx.ajax("GET", `${url}?seq=${encodeURIComponent(seq)}`, {
          source: node,
          target: node,
          swap: "afterend",
        });
      }
    }
  }).observe(events, { childList: true });
})();
