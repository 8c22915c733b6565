// The run form's task picker: a new domain empties the task field (htmx then lists that
// domain's tasks), and picking a task from the list fills the field instead of following
// the link (which is there for browsers without JS).
(() => {
  const domain = document.getElementById("id_domain");
  const input = document.getElementById("id_task_id");
  const picker = document.getElementById("task-picker");
  if (!domain || !input || !picker) return;

  // Runs before htmx's listener on #task-source (the select is deeper), so the list is
  // asked for with the field already empty.
  domain.addEventListener("change", () => { input.value = ""; });

  picker.addEventListener("click", (event) => {
    const link = event.target.closest("a[data-task-id]");
    if (!link) return;
    event.preventDefault();
    input.value = link.dataset.taskId;
    for (const other of picker.querySelectorAll("a[data-task-id]")) {
      other.classList.toggle("chosen", other === link);
      if (other === link) other.setAttribute("aria-current", "true");
      else other.removeAttribute("aria-current");
    }
    input.focus();
  });
})();
