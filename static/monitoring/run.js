// Live charts of a training run: polls the run's metrics (only the new steps) every 2 s while it
// is queued or running, and draws one small SVG line chart per metric, with alert thresholds.
(function () {
  "use strict";
  const state = document.getElementById("run-state");
  const charts = document.getElementById("charts");
  if (!state || !charts) return;
  const thresholds = JSON.parse(document.getElementById("alert-thresholds").textContent);
  const series = {};
  let lastStep = -1;
  const NS = "http://www.w3.org/2000/svg";
  const W = 320, H = 150, PAD = 34;

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(v) {
    const a = Math.abs(v);
    return a !== 0 && (a < 0.01 || a >= 10000) ? v.toExponential(1) : String(Math.round(v * 1000) / 1000);
  }
  function draw(name) {
    const points = series[name];
    let box = document.getElementById("chart-" + name);
    if (!box) {
      box = document.createElement("figure");
      box.id = "chart-" + name;
      box.className = "chart";
      box.dataset.metric = name;
      const caption = document.createElement("figcaption");
      caption.textContent = name;
      box.appendChild(caption);
      charts.appendChild(box);
    }
    const old = box.querySelector("svg");
    if (old) old.remove();
    const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": name + " by step" }, box);
    const rule = thresholds[name];
    const xs = points.map(function (p) { return p[0]; });
    const ys = points.map(function (p) { return p[1]; }).filter(Number.isFinite);
    if (rule) ys.push(rule.threshold);
    let x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    let y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x1 = x0 + 1; }
    if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
    const sx = function (x) { return PAD + (x - x0) / (x1 - x0) * (W - PAD - 8); };
    const sy = function (y) { return H - 18 - (y - y0) / (y1 - y0) * (H - 30); };
    el("line", { x1: PAD, y1: H - 18, x2: W - 8, y2: H - 18, class: "axis" }, svg);
    el("line", { x1: PAD, y1: 8, x2: PAD, y2: H - 18, class: "axis" }, svg);
    el("text", { x: 2, y: 14, class: "tick" }, svg).textContent = fmt(y1);
    el("text", { x: 2, y: H - 20, class: "tick" }, svg).textContent = fmt(y0);
    el("text", { x: W - 8, y: H - 4, class: "tick", "text-anchor": "end" }, svg).textContent = "step " + x1;
    if (rule) {
      el("line", { x1: PAD, x2: W - 8, y1: sy(rule.threshold), y2: sy(rule.threshold), class: "threshold" }, svg);
    }
    const path = points.filter(function (p) { return Number.isFinite(p[1]); })
      .map(function (p, i) { return (i ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1); }).join(" ");
    el("path", { d: path, class: "series" }, svg);
    box.dataset.points = String(points.length);
  }
  function update(data) {
    Object.keys(data.series).forEach(function (name) {
      const known = series[name] || (series[name] = []);
      data.series[name].forEach(function (p) {
        if (known.length && known[known.length - 1][0] >= p[0]) {
          // A resumed run logs a step again: replace from there on.
          while (known.length && known[known.length - 1][0] >= p[0]) known.pop();
        }
        known.push(p);
        lastStep = Math.max(lastStep, p[0]);
      });
      draw(name);
    });
    state.querySelector("[data-testid=run-status]").textContent = data.status;
    state.querySelector("[data-testid=run-status]").className = "status-" + data.status;
    state.querySelector("[data-testid=run-step]").textContent = data.step;
    state.querySelector("[data-testid=run-total]").textContent = data.total_steps || "?";
    state.querySelector("[data-testid=run-progress]").value = data.progress;
    if (data.heartbeat_at) {
      // The same HH:MM:SS (UTC) as the server renders.
      state.querySelector("[data-testid=run-heartbeat]").textContent = new Date(data.heartbeat_at).toISOString().slice(11, 19);
    }
    updateCheckpoints(data.checkpoints || []);
    const finished = ["succeeded", "failed", "cancelled"];
    if (finished.indexOf(data.status) >= 0 && finished.indexOf(state.dataset.status) < 0) {
      window.location.reload();  // the run just ended: show its error, summary and events
    }
    state.dataset.status = data.status;
  }
  function updateCheckpoints(rows) {
    const body = document.querySelector("[data-testid=checkpoints] tbody");
    if (!body || !rows.length || body.dataset.count === String(rows.length)) return;
    body.dataset.count = String(rows.length);
    body.textContent = "";
    rows.forEach(function (row) {
      const tr = document.createElement("tr");
      [String(row.step), row.path, "", row.created_at.slice(0, 19).replace("T", " ")].forEach(function (text, i) {
        const td = document.createElement("td");
        if (i === 1) { const code = document.createElement("code"); code.textContent = text; td.appendChild(code); }
        else td.textContent = text;
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
  }
  function poll() {
    fetch(state.dataset.metricsUrl + "?after=" + lastStep, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (data) {
        update(data);
        if (data.status === "queued" || data.status === "running") window.setTimeout(poll, 2000);
      })
      .catch(function () { window.setTimeout(poll, 5000); });
  }
  poll();
})();
