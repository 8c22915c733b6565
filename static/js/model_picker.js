// The model picker's search box: typing narrows the <select> to the models whose name,
// group (where they run) or price holds every typed word. Without JavaScript the box
// stays hidden and the full list works as it is.
(function () {
  "use strict";
  if (window.tau2ModelPicker) return; // included once per picker: bind once
  window.tau2ModelPicker = true;

  function narrow(input) {
    var select = document.getElementById(input.dataset.picker);
    if (!select) return;
    var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    var groups = select.querySelectorAll("optgroup");
    groups.forEach(function (group) {
      var where = (group.label || "").toLowerCase();
      var shown = 0;
      group.querySelectorAll("option").forEach(function (option) {
        var text = where + " " + option.textContent.toLowerCase() + " " + option.value.toLowerCase();
        var match = words.every(function (w) { return text.indexOf(w) !== -1; });
        option.hidden = !match && !option.selected;
        if (!option.hidden) shown += 1;
      });
      group.hidden = shown === 0;
    });
  }

  // The advice on limits for a connection's model (includes/limits_advice.html): shown
  // while a picked model of the form is a connection's ("@slug/model").
  function adviseLimits(form) {
    var advice = form ? form.querySelectorAll("[data-limits-advice]") : [];
    if (!advice.length) return;
    var picked = form.querySelectorAll(
      'select[name="agent_model"], select[name="user_model"], select[name="judge_model"]');
    var onConnection = Array.prototype.some.call(picked, function (select) {
      return select.value.trim().charAt(0) === "@";
    });
    advice.forEach(function (el) { el.hidden = !onConnection; });
  }

  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches(".model-picker select")) {
      adviseLimits(event.target.form);
    }
  });

  function bind(root) {
    root.querySelectorAll("input.model-search").forEach(function (input) {
      if (input.dataset.bound) return;
      input.dataset.bound = "1";
      input.hidden = false;
      input.addEventListener("input", function () { narrow(input); });
    });
  }

  document.addEventListener("DOMContentLoaded", function () { bind(document); });
  document.addEventListener("htmx:afterSwap", function (event) { bind(event.target); });
  if (document.readyState !== "loading") bind(document);
})();
