// Item browser keyboard: j/k move the current row, Enter opens it, / focuses the search,
// n/p follow the next/previous page links. Keys typed into a form field are left alone.
(function () {
  const rows = Array.from(document.querySelectorAll("table.items tbody tr[data-href]"));
  let current = -1;

  function select(index) {
    if (!rows.length) return;
    current = Math.max(0, Math.min(rows.length - 1, index));
    rows.forEach((row, i) => row.classList.toggle("current", i === current));
    rows[current].focus({ preventScroll: true });
    rows[current].scrollIntoView({ block: "nearest" });
  }

  function follow(selector) {
    const link = document.querySelector(selector);
    if (link) window.location.href = link.href;
  }

  rows.forEach((row, i) => row.addEventListener("click", (event) => {
    if (event.target.closest("a")) return;
    select(i);
    window.location.href = row.dataset.href;
  }));

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const field = event.target.closest("input, select, textarea");
    if (field) {
      if (event.key === "Escape") field.blur();
      return;
    }
    if (event.key === "j") select(current + 1);
    else if (event.key === "k") select(current - 1);
    else if (event.key === "Enter" && current >= 0) window.location.href = rows[current].dataset.href;
    else if (event.key === "/") { event.preventDefault(); document.querySelector("[data-testid=item-search]").focus(); }
    else if (event.key === "n") follow("a[rel=next]");
    else if (event.key === "p") follow("a[rel=prev]");
    else return;
    event.preventDefault();
  });
})();
