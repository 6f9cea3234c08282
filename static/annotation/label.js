// The labelling screen's keyboard: pick with 1/2/3/4 or the arrows (Shift = much better), Enter
// submits, Z brings back the last judgement, S skips. Buttons work without this script.
(function () {
  "use strict";
  const form = document.getElementById("verdict");
  if (!form) return;
  const shownAt = performance.now();
  const elapsed = form.querySelector("input[name=elapsed_ms]");
  const rationale = form.querySelector("textarea[name=rationale]");
  const maxStrength = Number(form.dataset.maxStrength || "1");
  let picked = form.dataset.currentPick || null;
  let submitting = false;

  function button(pick) {
    return form.querySelector('button[data-pick="' + pick + '"]');
  }
  function setStrength(level) {
    const radio = form.querySelector('input[name=strength][value="' + level + '"]');
    if (radio) radio.checked = true;
  }
  function select(pick) {
    if (!button(pick)) return;
    picked = pick;
    // A tie or "both bad" has no strength: grey the choice out while one is selected.
    form.querySelectorAll("input[name=strength]").forEach(function (radio) {
      radio.disabled = pick === "tie" || pick === "both_bad";
    });
    form.querySelectorAll("button[data-pick]").forEach(function (b) {
      b.classList.toggle("selected", b.dataset.pick === pick);
      b.setAttribute("aria-pressed", b.dataset.pick === pick ? "true" : "false");
    });
  }
  function submit() {
    if (!picked || submitting) return;
    submitting = true;  // a second Enter or a double click sends nothing more
    form.requestSubmit(button(picked));
  }
  form.addEventListener("submit", function (event) {
    if (submitting && event.submitter && event.submitter.dataset.pick !== picked) {
      event.preventDefault();
      return;
    }
    submitting = true;
    elapsed.value = String(Math.round(performance.now() - shownAt));
  });
  if (picked) select(picked);

  const keys = { "1": "left", ArrowLeft: "left", "2": "right", ArrowRight: "right", "3": "tie", "4": "both_bad" };
  const shifted = { "!": "left", "@": "right" };  // Shift+1 / Shift+2 on US layouts
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) {
      if (event.key === "Enter" && document.activeElement === rationale) submit();
      return;
    }
    if (document.activeElement === rationale) {
      if (event.key === "Escape") rationale.blur();
      return;
    }
    const digit = event.code && event.code.startsWith("Digit") ? event.code.slice(5) : null;
    let pick = keys[event.key] || shifted[event.key] || (digit && keys[digit]);
    if (pick) {
      event.preventDefault();
      select(pick);
      if (pick === "left" || pick === "right") setStrength(event.shiftKey ? maxStrength : 1);
      return;
    }
    if (event.key === "Enter") { event.preventDefault(); submit(); }
    else if (event.key === "z" || event.key === "Z") { window.location.assign(form.dataset.undoUrl); }
    else if (event.key === "s" || event.key === "S") {
      const skip = document.getElementById("skip");
      if (skip) skip.requestSubmit();
    }
  });
})();
