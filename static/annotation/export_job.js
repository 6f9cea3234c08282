// Follow an export job on its page: poll its status, update the badge, phase and progress line;
// reload when it finishes (the page then shows its downloads or its error).
(function () {
  "use strict";
  const FINISHED = ["succeeded", "failed", "cancelled"];  // the one job lifecycle's ends
  const card = document.querySelector("[data-testid=export-job][data-job-url]");
  if (!card || FINISHED.indexOf(card.dataset.status) >= 0) return;
  function poll() {
    fetch(card.dataset.jobUrl, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (job) {
        const state = card.querySelector("[data-testid=job-state]");
        if (state) {
          state.textContent = job.status_label;  // the lifecycle's words, as the partial renders them
          state.className = "job-state status-" + job.status;
          state.dataset.state = job.status;
        }
        const waiting = card.querySelector(".waits-behind");
        if (waiting && job.status !== "queued") waiting.hidden = true;  // a worker took it
        card.querySelector(".job-phase").textContent = job.phase;
        const bar = card.querySelector(".job-progress");
        bar.max = job.rows_total || Math.max(job.rows_done, 1);
        bar.value = job.rows_done || 0;
        card.querySelector(".job-rows").textContent = job.progress_text;
        const cancel = card.querySelector("[data-testid=export-job-cancel] button");
        if (cancel && job.cancel_requested) { cancel.disabled = true; cancel.textContent = "Stopping…"; }
        if (FINISHED.indexOf(job.status) >= 0) window.location.reload();
        else window.setTimeout(poll, 1000);
      })
      .catch(function () { window.setTimeout(poll, 3000); });
  }
  window.setTimeout(poll, 500);
})();
