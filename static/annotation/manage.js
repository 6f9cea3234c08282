// Poll the status of running imports and update their progress rows; reload when one finishes.
(function () {
  "use strict";
  const FINISHED = ["succeeded", "failed", "cancelled"];  // the one job lifecycle's ends
  const rows = Array.from(document.querySelectorAll("tr[data-job-url]")).filter(function (row) {
    return FINISHED.indexOf(row.dataset.status) < 0;
  });
  if (!rows.length) return;
  function duration(seconds) {  // as annotation.services.import_result.duration_text
    if (seconds < 60) return seconds + " s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min " + String(seconds % 60).padStart(2, "0") + " s";
    return Math.floor(minutes / 60) + " h " + String(minutes % 60).padStart(2, "0") + " min";
  }
  function poll() {
    Promise.all(rows.map(function (row) {
      return fetch(row.dataset.jobUrl, { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (job) {
          const state = row.querySelector("[data-testid=job-state]");
          state.textContent = job.status_label;  // the lifecycle's words, as the partial renders them
          state.className = "job-state status-" + job.status;
          state.dataset.state = job.status;
          row.querySelector(".job-phase").textContent = job.status === "running" ? job.phase : "";
          const waiting = row.querySelector(".waits-behind");
          if (waiting && job.status !== "queued") waiting.hidden = true;  // a worker took it
          const bar = row.querySelector(".job-progress");
          bar.max = job.rows_total || Math.max(job.rows_done, 1);
          bar.value = job.rows_done || 0;
          let text = (job.rows_done || 0) + (job.rows_total ? " / " + job.rows_total : "");
          if (job.rows_per_s) text += ", " + job.rows_per_s + " rows/s";
          if (job.eta_s !== null && job.eta_s !== undefined) text += ", " + duration(job.eta_s) + " left";
          row.querySelector(".job-rows").textContent = text;
          return FINISHED.indexOf(job.status) >= 0;
        });
    })).then(function (finished) {
      if (finished.some(Boolean)) window.location.reload();
      else window.setTimeout(poll, 1000);
    }).catch(function () { window.setTimeout(poll, 3000); });
  }
  window.setTimeout(poll, 500);
})();
