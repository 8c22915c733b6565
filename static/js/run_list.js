// Run list: "Compare selected" sends the ticked runs as one ids=1,2,3 parameter.
// Delegated from the document, once: htmx swaps the whole body when filters change.
if (!window.runListReady) {
  window.runListReady = true;
  document.addEventListener("submit", (ev) => {
    if (ev.target.id !== "compare-form") return;
    const picks = [...ev.target.querySelectorAll("input[name=pick]")];
    document.getElementById("compare-ids").value =
      picks.filter((c) => c.checked).map((c) => c.value).join(",");
    picks.forEach((c) => { c.disabled = true; });
  });
}
