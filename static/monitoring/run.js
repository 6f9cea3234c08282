// A training run's live page: polls the run's metrics.json (only the new steps and samples) every
// 2 s while it is queued or running; draws one chart per metric in its group (charts.js), the
// summary table, the phase before the first step, the checkpoints (re-drawn only when they change)
// and the samples of each evaluation step.
(function () {
  "use strict";
  const state = document.getElementById("run-state");
  const container = document.getElementById("charts");
  const C = window.ConcordCharts;
  if (!state || !container || !C) return;
  const thresholds = JSON.parse(document.getElementById("alert-thresholds").textContent);
  const series = {};      // metric -> [[step, value], ...]
  const meta = {};        // metric -> {group, group_title, direction}
  const charts = {};      // metric -> MetricChart
  const samples = {};     // step -> [{prompt, response, reward, figures}]
  let lastStep = -1;
  let lastSampleStep = -1;
  let checkpointsShown = JSON.stringify(JSON.parse(document.getElementById("initial-checkpoints").textContent));
  const controls = C.bindControls(charts);
  C.live = charts;  // for the browser tests and the console

  function text(tag, content, className) {
    const node = document.createElement(tag);
    node.textContent = content;
    if (className) node.className = className;
    return node;
  }

  // The server's chart order (selectors.PREFERRED), then alphabetical.
  function rank(name) { return (meta[name] || {}).order || 0; }

  function chartFor(name) {
    if (charts[name]) return charts[name];
    const group = (meta[name] || {}).group || "other";
    const box = C.figureFor(container, name, group, rank);
    const rule = thresholds[name];
    const chart = new C.MetricChart(box, name, [name], rule ? rule.threshold : null, (meta[name] || {}).unit_interval);
    chart.smoothing = controls.smoothing();
    chart.log = controls.log();
    charts[name] = chart;
    return chart;
  }

  function addPoints(name, points) {
    const known = series[name] || (series[name] = []);
    points.forEach(function (p) {
      // A resumed run logs a step again: replace from there on.
      while (known.length && known[known.length - 1][0] >= p[0]) known.pop();
      known.push(p);
      lastStep = Math.max(lastStep, p[0]);
    });
  }

  function renderSummary() {
    const body = document.querySelector("[data-testid=summary] tbody");
    // In page order: by group, then as the charts are.
    const names = Object.keys(series).sort(function (a, b) {
      const ga = (meta[a] || {}).group_order || 0, gb = (meta[b] || {}).group_order || 0;
      if (ga !== gb) return ga - gb;
      if (rank(a) !== rank(b)) return rank(a) - rank(b);
      return a < b ? -1 : 1;
    });
    if (!names.length) return;
    body.textContent = "";
    names.forEach(function (name) {
      const info = meta[name] || {};
      const s = C.summarise(series[name], info.direction);
      if (!s) return;
      const tr = document.createElement("tr");
      tr.dataset.metric = name;
      [
        name, info.group_title || "", C.fmt(s.last[1]), String(s.last[0]),
        s.best ? C.fmt(s.best[1]) + (info.direction === "min" ? " (lowest)" : " (highest)") : "–",
        s.best ? String(s.best[0]) : "–", C.fmt(s.min), C.fmt(s.max), String(s.count),
      ].forEach(function (value, i) {
        const td = text("td", value);
        if (i === 0) { td.textContent = ""; td.appendChild(text("code", value)); }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
  }

  function checkpointRow(row) {
    const tr = document.createElement("tr");
    tr.dataset.checkpoint = String(row.id);
    const step = text("td", String(row.step));
    if (row.result) { step.appendChild(document.createTextNode(" ")); step.appendChild(text("strong", "(result)", "result-mark")); }
    tr.appendChild(step);
    const folder = document.createElement("td");
    folder.appendChild(text("code", row.path));
    tr.appendChild(folder);
    const metrics = document.createElement("td");
    metrics.className = "ck-metrics";
    if (row.metrics_step === null) metrics.textContent = "–";
    else {
      if (row.metrics_step !== row.step) metrics.appendChild(text("span", "at step " + row.metrics_step + ": ", "muted"));
      Object.keys(row.metrics).forEach(function (name) {
        metrics.appendChild(text("span", name + " " + C.fmt(row.metrics[name]), "ck-metric"));
      });
    }
    tr.appendChild(metrics);
    tr.appendChild(text("td", row.saved));
    const evalCell = document.createElement("td");
    if (row.eval_url) {
      const a = text("a", "start a human-eval round");
      a.href = row.eval_url;
      evalCell.appendChild(a);
    }
    tr.appendChild(evalCell);
    return tr;
  }

  function renderCheckpoints(rows) {
    const signature = JSON.stringify(rows);
    if (signature === checkpointsShown) return;  // the server's table is already right
    checkpointsShown = signature;
    const body = document.querySelector("[data-testid=checkpoints] tbody");
    body.textContent = "";
    if (!rows.length) {
      const td = text("td", "No checkpoint yet.", "empty");
      td.colSpan = 5;
      const tr = document.createElement("tr");
      tr.appendChild(td);
      body.appendChild(tr);
    }
    rows.forEach(function (row) { body.appendChild(checkpointRow(row)); });
  }

  // A sample's figure in words: "finished" (1 when the answer ended with EOS) as a phrase, the
  // others as "name value".
  function figureText(name, value) {
    if (name === "finished") return value ? "ended with EOS" : "no EOS (cut at max_new_tokens)";
    return name + " " + C.fmt(value);
  }

  function renderSamples() {
    const select = document.getElementById("sample-step");
    const table = document.querySelector("[data-testid=samples]");
    if (!select || !table) return;
    const steps = Object.keys(samples).map(Number).sort(function (a, b) { return b - a; });
    if (!steps.length) return;
    const chosen = select.value && select.dataset.userChose ? Number(select.value) : steps[0];
    select.textContent = "";
    steps.forEach(function (step) {
      const option = text("option", "step " + step + " (" + samples[step].length + ")");
      option.value = String(step);
      option.selected = step === chosen;
      select.appendChild(option);
    });
    const body = table.querySelector("tbody");
    body.textContent = "";
    (samples[chosen] || []).forEach(function (sample) {
      const tr = document.createElement("tr");
      tr.className = "sample";
      tr.appendChild(text("td", sample.prompt, "sample-text"));
      tr.appendChild(text("td", sample.response, "sample-text"));
      tr.appendChild(text("td", C.fmt(sample.reward)));
      const figures = Object.keys(sample.figures || {}).map(function (k) { return figureText(k, sample.figures[k]); });
      tr.appendChild(text("td", figures.join(" · ")));
      body.appendChild(tr);
    });
    table.dataset.step = String(chosen);
  }

  const stepSelect = document.getElementById("sample-step");
  if (stepSelect) stepSelect.addEventListener("change", function () {
    stepSelect.dataset.userChose = "1";
    renderSamples();
  });

  function renderState(data) {
    const status = state.querySelector("[data-testid=run-status]");
    status.textContent = data.status_label;  // the lifecycle's words, as the partial renders them
    status.className = "job-state status-" + data.status;
    status.dataset.state = data.status;
    state.querySelector("[data-testid=run-step]").textContent = data.step;
    state.querySelector("[data-testid=run-total]").textContent = data.total_steps || "?";
    state.querySelector("[data-testid=run-progress]").value = data.progress;
    const waiting = document.querySelector("[data-testid=waits-behind]");
    if (waiting && data.status !== "queued") waiting.hidden = true;  // a worker took it
    const phase = state.querySelector("[data-testid=run-phase]");
    phase.hidden = !data.phase;
    phase.textContent = data.phase ? data.phase.text : "";
    if (data.heartbeat_at) {
      // The same HH:MM:SS (UTC) as the server renders.
      state.querySelector("[data-testid=run-heartbeat]").textContent = new Date(data.heartbeat_at).toISOString().slice(11, 19);
    }
  }

  function update(data) {
    Object.assign(meta, data.meta || {});
    const changed = Object.keys(data.series);
    changed.forEach(function (name) { addPoints(name, data.series[name]); });
    changed.forEach(function (name) {
      const chart = chartFor(name);
      chart.setLine(0, series[name]);
      chart.render();
    });
    if (changed.length) renderSummary();
    (data.samples || []).forEach(function (entry) {
      samples[entry.step] = entry.samples;
      lastSampleStep = Math.max(lastSampleStep, entry.step);
    });
    if ((data.samples || []).length) renderSamples();
    renderState(data);
    renderCheckpoints(data.checkpoints || []);
    const finished = ["succeeded", "failed", "cancelled"];
    if (finished.indexOf(data.status) >= 0 && finished.indexOf(state.dataset.status) < 0) {
      window.location.reload();  // the run just ended: show its error, summary and events
    }
    state.dataset.status = data.status;
  }

  function poll() {
    const url = state.dataset.metricsUrl + "?after=" + lastStep + "&samples_after=" + lastSampleStep;
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (data) {
        update(data);
        if (data.status === "queued" || data.status === "running") window.setTimeout(poll, 2000);
      })
      .catch(function () { window.setTimeout(poll, 5000); });
  }
  poll();
})();
