// Clusters page: poll a queued/running clustering run and reload when it ends; clicking a row of
// the cluster table highlights that cluster's points in the scatter plot (click again to clear).
(function () {
  "use strict";
  const box = document.getElementById("recluster");
  if (box && (box.dataset.status === "queued" || box.dataset.status === "running")) {
    const bar = box.querySelector(".run-progress progress");
    const stage = box.querySelector(".run-stage");
    const poll = function () {
      fetch(box.dataset.statusUrl, { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (run) {
          if (!run.active) { window.location.reload(); return; }
          bar.value = run.progress;
          stage.textContent = run.stage;
          const waiting = box.querySelector(".waits-behind");
          if (waiting && run.status !== "queued") waiting.hidden = true;  // a worker took it
          const state = box.querySelector("[data-testid=clustering-state]");
          if (state) {  // the lifecycle's words, as the partial renders them
            state.textContent = run.status_label;
            state.className = "job-state status-" + run.status;
            state.dataset.state = run.status;
          }
          window.setTimeout(poll, 1000);
        })
        .catch(function () { window.setTimeout(poll, 3000); });
    };
    window.setTimeout(poll, 500);
  }

  const svg = document.querySelector("svg.scatter");
  if (!svg) return;
  let focused = null;
  document.querySelectorAll(".clusters tr[data-cluster]").forEach(function (row) {
    row.addEventListener("click", function (event) {
      if (event.target.closest("form")) return; // typing a name is not a click on the row
      const label = row.dataset.cluster;
      focused = focused === label ? null : label;
      svg.classList.toggle("focused", focused !== null);
      svg.querySelectorAll("circle").forEach(function (c) {
        c.classList.toggle("focus", c.dataset.cluster === focused);
      });
      document.querySelectorAll(".clusters tr[data-cluster]").forEach(function (r) {
        r.classList.toggle("focus", r.dataset.cluster === focused);
      });
    });
  });
})();
