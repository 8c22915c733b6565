// Starting an evaluation: the split list follows the chosen domain (the preview itself is
// re-rendered by htmx on every change of the form, one request at a time: the form's
// hx-sync="this:queue last" never aborts one, so typing logs no htmx:sendAbort).
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

  // A change made before htmx listened (a slow load) would leave the preview the
  // server rendered: once everything has loaded, ask again if the form moved since.
  function moved(form) {
    return Array.from(form.elements).some((field) => {
      if (field.options) return Array.from(field.options).some((o) => o.selected !== o.defaultSelected);
      if (field.type === "checkbox" || field.type === "radio") return field.checked !== field.defaultChecked;
      return "defaultValue" in field && field.value !== field.defaultValue;
    });
  }
  window.addEventListener("load", () => {
    const form = document.getElementById("evaluation-form");
    if (form && window.htmx && moved(form)) window.htmx.trigger(form, "change");
  });
})();
