// What any page's buttons may ask for, by attribute (loaded by templates/base.html):
//
// * <form data-confirm="Stop 34 runs? …"> asks with the browser's confirm() before it is
//   submitted; "Cancel" submits nothing. With data-confirm-from="#id" the words are read,
//   when the form is submitted, from that element's own data-confirm (a live part of the
//   page keeps them current, e.g. how many runs a Stop would stop). htmx elements use
//   htmx's own hx-confirm instead.
// * <button type="button" data-copy="#element-id">Copy</button> copies that element's
//   value (an input or a textarea) or its text, and says "Copied" for a moment.
//
// Delegated from the document, so parts of a page added later (htmx, a socket) work too.
(() => {
  const COPIED_MS = 2000;

  function confirmWords(form) {
    const from = form.dataset.confirmFrom;
    const source = from ? document.querySelector(from) : null;
    return (source && source.dataset.confirm) || form.dataset.confirm;
  }

  // Capture phase: asked before any listener of the form itself (htmx's included) runs.
  document.addEventListener(
    "submit",
    (event) => {
      const form = event.target;
      if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-confirm")) return;
      if (!window.confirm(confirmWords(form))) {
        event.preventDefault();
        event.stopImmediatePropagation();
      }
    },
    true,
  );

  function textOf(element) {
    if (element instanceof HTMLInputElement || element instanceof HTMLTextAreaElement) {
      return element.value;
    }
    return element.textContent.trim();
  }

  // navigator.clipboard needs a secure context (https, or localhost); elsewhere the
  // older execCommand on a selection still copies.
  async function copy(text, element) {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return;
    }
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    (element.closest("dialog") || document.body).append(area);
    area.select();
    const copied = document.execCommand("copy");
    area.remove();
    if (!copied) throw new Error("copy refused");
  }

  function say(button, words) {
    if (!button.dataset.copyLabel) button.dataset.copyLabel = button.textContent;
    button.setAttribute("aria-live", "polite");
    button.textContent = words;
    clearTimeout(Number(button.dataset.copyTimer));
    button.dataset.copyTimer = String(
      setTimeout(() => {
        button.textContent = button.dataset.copyLabel;
      }, COPIED_MS),
    );
  }

  document.addEventListener("click", (event) => {
    // The contract names the element by id ("#snippet"); other values are a page's own.
    const button = event.target.closest('[data-copy^="#"]');
    if (!button) return;
    const element = document.getElementById(button.dataset.copy.slice(1));
    if (!element) return;
    event.preventDefault();
    copy(textOf(element), element).then(
      () => say(button, "Copied"),
      () => {
        // Refused (no permission): leave the text selected so Ctrl+C copies it.
        if (element.select) element.select();
        say(button, "Press Ctrl+C to copy");
      },
    );
  });
})();
