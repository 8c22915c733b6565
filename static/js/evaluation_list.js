// The history's "Compare two selected": the checked evaluations become ?ids=a,b.
document.getElementById("compare-form")?.addEventListener("submit", () => {
  const picks = [...document.querySelectorAll("input[name=pick]")];
  document.getElementById("compare-ids").value = picks.filter((c) => c.checked).map((c) => c.value).join(",");
  picks.forEach((c) => { c.disabled = true; });
});
