// Poll the status of running imports and update their progress rows; reload when one finishes.
(function () {
  "use strict";
  const rows = Array.from(document.querySelectorAll("tr[data-job-url]")).filter(function (row) {
    return row.dataset.status !== "done" && row.dataset.status !== "failed";
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
          row.querySelector(".job-status").textContent = job.phase;
          const waiting = row.querySelector(".waits-behind");
          if (waiting && job.status !== "queued") waiting.hidden = true;  // a worker took it
          const bar = row.querySelector(".job-progress");
          bar.max = job.rows_total || Math.max(job.rows_done, 1);
          bar.value = job.rows_done || 0;
          let text = (job.rows_done || 0) + (job.rows_total ? " / " + job.rows_total : "");
          if (job.rows_per_s) text += ", " + job.rows_per_s + " rows/s";
          if (job.eta_s !== null && job.eta_s !== undefined) text += ", " + duration(job.eta_s) + " left";
          row.querySelector(".job-rows").textContent = text;
          return job.status === "done" || job.status === "failed";
        });
    })).then(function (finished) {
      if (finished.some(Boolean)) window.location.reload();
      else window.setTimeout(poll, 1000);
    }).catch(function () { window.setTimeout(poll, 3000); });
  }
  window.setTimeout(poll, 500);
})();
