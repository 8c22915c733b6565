// "Connect an agent": each Copy button copies the snippet it names (data-copy = the
// <pre>'s id) and says so for a moment.
(function () {
  "use strict";

  function copied(button, label) {
    var before = button.textContent;
    button.textContent = label;
    setTimeout(function () { button.textContent = before; }, 1500);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) return;
    var source = document.getElementById(button.dataset.copy);
    if (!source) return;
    var text = source.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () { copied(button, "Copied"); },
        function () { copied(button, "Select and copy"); }
      );
      return;
    }
    // Plain http (no clipboard API): select the snippet for Ctrl+C.
    var range = document.createRange();
    range.selectNodeContents(source);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    copied(button, "Selected: press Ctrl+C");
  });
})();
