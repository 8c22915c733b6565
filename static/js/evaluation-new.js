// Starting an evaluation: the split list follows the chosen domain (the preview itself is
// re-rendered by htmx on every change of the form).
(() => {
  const domain = document.getElementById("id_domain");
  const split = document.getElementById("id_split");
  if (!domain || !split) return;

  function follow() {
    const wanted = split.value;
    const options = Array.from(split.options);
    for (const option of options) {
      const mine = option.dataset.domain === domain.value;
      option.hidden = !mine;
      option.disabled = !mine;
    }
    const mine = options.filter((o) => !o.disabled);
    const pick = mine.find((o) => o.value === wanted) || mine.find((o) => o.value === "test") || mine[0];
    if (pick) pick.selected = true;
  }

  // Runs before htmx's listener on the form (the select is deeper), so the preview asks
  // about a split of the new domain.
  domain.addEventListener("change", follow);
  follow();
})();
