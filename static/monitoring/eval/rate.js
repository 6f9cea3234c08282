// The blind eval screen: keyboard picks, time on the item, Enter submits, S skips (as on the
// labelling screens).
(function () {
  "use strict";
  const form = document.getElementById("eval-verdict");
  if (!form) return;
  const skip = document.getElementById("skip");
  const started = performance.now();
  const check = (name, value) => {
    const input = form.querySelector(`input[name="${name}"][value="${value}"]`);
    if (input) input.checked = true;
  };
  const picks = { "1": "left", "2": "right", "3": "tie", ArrowLeft: "left", ArrowRight: "right" };
  const shifted = { "!": "1", "@": "2", "#": "3", "$": "4", "%": "5" };
  document.addEventListener("keydown", (event) => {
    if (event.target.tagName === "TEXTAREA") return;
    if (event.shiftKey && (shifted[event.key] || /^Digit[1-5]$/.test(event.code))) {
      check("usefulness", shifted[event.key] || event.code.slice(5));
      event.preventDefault();
    } else if (picks[event.key]) {
      check("pick", picks[event.key]);
      event.preventDefault();
    } else if ((event.key === "s" || event.key === "S") && skip) {
      event.preventDefault();
      skip.requestSubmit();
    } else if (event.key === "Enter") {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", () => {
    form.elements.elapsed_ms.value = String(Math.round(performance.now() - started));
  });
})();
