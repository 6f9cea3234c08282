// New-round form: the win-rate interval width the number of prompts gives, shown as the user types,
// and how many prompts the chosen checkpoint and project allow (the number is capped there).
// Normal approximation at 95%, worst case p = 0.5 (monitoring/stats/stopping.py sample_size_for_width):
// width = 2 * 1.96 * sqrt(0.25 / n); the ratings of one prompt are not independent, so n = prompts.
(function () {
  "use strict";
  const size = document.querySelector("input[data-interval-width]");
  const out = document.getElementById("interval-width");
  if (!size || !out) return;
  const MIN_PROMPTS = 30;

  function show() {
    const n = Number.parseInt(size.value, 10);
    out.classList.remove("warn");
    if (!Number.isFinite(n) || n < 1) {
      out.textContent = "";
      return;
    }
    const width = 2 * 1.96 * Math.sqrt(0.25 / n);
    let text = n + " prompts give a win-rate interval about " + width.toFixed(2) + " wide (95%).";
    if (n < MIN_PROMPTS) {
      text += " Under " + MIN_PROMPTS + " prompts the interval is too wide to decide anything.";
      out.classList.add("warn");
    }
    out.textContent = text;
  }

  size.parentElement.after(out);  // right under the number it speaks of
  size.addEventListener("input", show);
  show();

  // The prompts a round may use: those of the project neither model trained on. Asked as the
  // checkpoint, baseline checkpoint or project changes; the number of prompts is capped there.
  const form = size.form;
  const available = document.getElementById("prompts-available");
  if (!form || !available || !form.dataset.availableUrl) return;
  const field = (name) => form.elements.namedItem(name);
  let asked = 0;
  async function check() {
    const checkpoint = field("checkpoint"), project = field("project");
    const baseline = field("baseline_checkpoint");
    available.textContent = "";
    available.classList.remove("warn");
    size.removeAttribute("max");
    if (!checkpoint || !project || !checkpoint.value || !project.value) return;
    const query = new URLSearchParams({ checkpoint: checkpoint.value, project: project.value });
    if (baseline && baseline.value) query.set("baseline_checkpoint", baseline.value);
    const mine = ++asked;
    try {
      const response = await fetch(`${form.dataset.availableUrl}?${query}`, { credentials: "same-origin" });
      if (mine !== asked || !response.ok) return;  // a later choice's answer wins
      const body = await response.json();
      let text = body.message;
      if (body.available !== null) {
        size.max = String(Math.max(1, body.available));
        const n = Number.parseInt(size.value, 10);
        if (body.available > 0 && Number.isFinite(n) && n > body.available) {
          size.value = String(body.available);
          text += ` The number of prompts was lowered from ${n} to ${body.available}.`;
          show();
        }
        if (body.available === 0) available.classList.add("warn");
      }
      available.textContent = text;
    } catch (error) { /* the server checks again on submit */ }
  }
  for (const name of ["checkpoint", "baseline_checkpoint", "project"]) {
    const select = field(name);
    if (select) select.addEventListener("change", check);
  }
  size.parentElement.before(available);  // right above the number it caps
  check();
})();
