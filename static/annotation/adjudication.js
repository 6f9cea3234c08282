// The adjudication screen. Keys: 1/2/3/4 (or the arrows) pick, Enter saves, R focuses the note (Esc
// leaves it; Ctrl+Enter saves from it), S skips to the next comparison. Buttons work without this script.
(function () {
  "use strict";
  const form = document.getElementById("adjudicate");
  if (!form) return;
  const note = form.querySelector("textarea[name=note]");
  const skipLink = document.getElementById("adjudicate-skip");
  const keys = { "1": "left", ArrowLeft: "left", "2": "right", ArrowRight: "right", "3": "tie", "4": "both_bad" };
  let picked = null;
  let saving = false;

  function button(pick) { return form.querySelector('button[data-pick="' + pick + '"]'); }
  function select(pick) {
    if (!button(pick)) return;
    picked = pick;
    form.querySelectorAll("button[data-pick]").forEach(function (b) {
      b.classList.toggle("selected", b.dataset.pick === pick);
      b.setAttribute("aria-pressed", b.dataset.pick === pick ? "true" : "false");
    });
  }
  function save() {
    if (!picked || saving) return;
    saving = true;
    form.requestSubmit(button(picked));
  }
  form.addEventListener("submit", function () { saving = true; });
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) {
      if (event.key === "Enter" && document.activeElement === note) { event.preventDefault(); save(); }
      return;
    }
    if (document.activeElement === note) {
      if (event.key === "Escape") note.blur();
      return;
    }
    const active = document.activeElement;
    if (active && active.tagName === "INPUT" && active.type !== "submit") return;  // the threshold box
    const digit = event.code && event.code.startsWith("Digit") ? event.code.slice(5) : null;
    const pick = keys[event.key] || (digit && keys[digit]);
    if (pick) { event.preventDefault(); select(pick); return; }
    const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
    if (key === "Enter") { event.preventDefault(); if (!event.repeat) save(); }
    else if (key === "r") { event.preventDefault(); note.focus(); }
    else if (key === "s" && skipLink) { event.preventDefault(); window.location.assign(skipLink.href); }
  });
})();
