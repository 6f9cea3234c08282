// New-round form: the win-rate interval width the number of prompts gives, shown as the user types.
// Normal approximation at 95%, worst case p = 0.5 (monitoring/stopping.py sample_size_for_width):
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
})();
