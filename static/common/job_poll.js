// Follow every job on the page that has not finished: each element with data-job-url (the job's
// status JSON) and data-status. Updates the state badge, the phase, the waiting line, the progress
// bar and the rows line (the job's progress_text, or rows/total, rate and time left when the JSON
// has none), disables a cancel button once a stop is asked; reloads the page when a job finishes
// (it then shows the job's downloads, summary or error). Used by the Manage pages (imports, export
// jobs) and an export job's page.
(function () {
  "use strict";
  const FINISHED = ["succeeded", "failed", "cancelled"];  // the one job lifecycle's ends
  const jobs = Array.from(document.querySelectorAll("[data-job-url][data-status]")).filter(
    function (el) { return FINISHED.indexOf(el.dataset.status) < 0; });
  if (!jobs.length) return;
  function duration(seconds) {  // as annotation.services.import_result.duration_text
    if (seconds < 60) return seconds + " s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min " + String(seconds % 60).padStart(2, "0") + " s";
    return Math.floor(minutes / 60) + " h " + String(minutes % 60).padStart(2, "0") + " min";
  }
  function rowsText(job) {
    if (typeof job.progress_text === "string") return job.progress_text;
    let text = (job.rows_done || 0) + (job.rows_total ? " / " + job.rows_total : "");
    if (job.rows_per_s) text += ", " + job.rows_per_s + " rows/s";
    if (job.eta_s !== null && job.eta_s !== undefined) text += ", " + duration(job.eta_s) + " left";
    return text;
  }
  function show(el, job) {
    const state = el.querySelector("[data-testid=job-state]");
    if (state) {
      state.textContent = job.status_label;  // the lifecycle's words, as the partial renders them
      state.className = "job-state status-" + job.status;
      state.dataset.state = job.status;
    }
    const phase = el.querySelector(".job-phase");
    if (phase) phase.textContent = job.status === "running" ? job.phase : "";
    const waiting = el.querySelector(".waits-behind");
    if (waiting && job.status !== "queued") waiting.hidden = true;  // a worker took it
    const bar = el.querySelector(".job-progress");
    if (bar) {
      bar.max = job.rows_total || Math.max(job.rows_done, 1);
      bar.value = job.rows_done || 0;
    }
    const rows = el.querySelector(".job-rows");
    if (rows) rows.textContent = rowsText(job);
    const cancel = el.querySelector("[data-job-cancel] button");
    if (cancel && job.cancel_requested) { cancel.disabled = true; cancel.textContent = "Stopping…"; }
    return FINISHED.indexOf(job.status) >= 0;
  }
  function poll() {
    Promise.all(jobs.map(function (el) {
      return fetch(el.dataset.jobUrl, { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (job) { return show(el, job); });
    })).then(function (finished) {
      if (finished.some(Boolean)) window.location.reload();
      else window.setTimeout(poll, 1000);
    }).catch(function () { window.setTimeout(poll, 3000); });
  }
  window.setTimeout(poll, 500);
})();
