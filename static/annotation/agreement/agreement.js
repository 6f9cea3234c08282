/* Agreement dashboard: draws the charts as plain SVG from the cached report (agreement-data URL).
   No library, no inline script. Tables on the page are rendered by the server; these charts repeat
   them visually. While the report is missing or being recomputed the page polls and offers a reload. */
"use strict";

(function () {
  const app = document.getElementById("agreement-app");
  if (!app) return;
  const SVG = "http://www.w3.org/2000/svg";
  const dataUrl = app.dataset.url;
  const renderedWithReport = app.dataset.ready === "1";
  let shownComputedAt = null;

  function node(name, attrs, parent, text) {
    const element = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attrs || {})) element.setAttribute(key, value);
    if (text !== undefined) element.textContent = text;
    if (parent) parent.appendChild(element);
    return element;
  }

  function svg(container, width, height, label) {
    container.textContent = "";
    // Natural size, scaled down (never up) by the stylesheet's max-width.
    return node("svg", {
      viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": label,
      preserveAspectRatio: "xMinYMin meet",
    }, container);
  }

  const fmt = (value, digits = 3) => (value === null || value === undefined ? "n/a" : value.toFixed(digits));

  /* Red below 0, amber at 0.4, green from the target up. */
  function kappaColour(kappa, target) {
    if (kappa === null || kappa === undefined) return "#e3e6ee";
    const stops = [[-0.2, [192, 57, 43]], [0.4, [230, 160, 40]], [target, [120, 190, 90]], [1, [30, 122, 52]]];
    const k = Math.max(stops[0][0], Math.min(1, kappa));
    for (let i = 1; i < stops.length; i += 1) {
      const [x1, c1] = stops[i];
      const [x0, c0] = stops[i - 1];
      if (k <= x1) {
        const t = (k - x0) / (x1 - x0 || 1);
        const rgb = c0.map((c, j) => Math.round(c + t * (c1[j] - c)));
        return `rgb(${rgb.join(",")})`;
      }
    }
    return "rgb(30,122,52)";
  }

  function coefficientChart(container, report) {
    const summary = report.summary;
    const keys = ["percent_agreement", "percent_agreement_no_ties", "fleiss_kappa", "krippendorff_alpha", "gwet_ac1"];
    const labels = ["Percent agreement", "… ties left out", "Fleiss' kappa", "Krippendorff's alpha", "Gwet's AC1"];
    const lows = keys.map((k) => summary.intervals[k][0]).filter((v) => v !== null);
    const xmin = Math.min(-0.2, ...lows);
    const width = 720, rowH = 30, left = 190, right = 60, top = 24;
    const height = top + rowH * keys.length + 24;
    const x = (v) => left + ((v - xmin) / (1 - xmin)) * (width - left - right);
    const root = svg(container, width, height, "Agreement coefficients with 95% intervals and the kappa target");
    for (const tick of [0, 0.2, 0.4, 0.6, 0.8, 1]) {
      node("line", { x1: x(tick), x2: x(tick), y1: top - 6, y2: height - 20, class: "grid-line" }, root);
      node("text", { x: x(tick), y: height - 6, class: "tick", "text-anchor": "middle" }, root, tick.toFixed(1));
    }
    const target = report.kappa_target;
    node("line", { x1: x(target), x2: x(target), y1: top - 12, y2: height - 20, class: "target-line" }, root);
    node("text", { x: x(target) + 4, y: top - 12, class: "target-label" }, root, `target κ ${target}`);
    keys.forEach((key, i) => {
      const y = top + rowH * i + rowH / 2;
      const value = summary[key];
      const [low, high] = summary.intervals[key];
      node("text", { x: left - 10, y: y + 4, "text-anchor": "end", class: "label" }, root, labels[i]);
      if (low !== null && high !== null) {
        node("line", { x1: x(low), x2: x(high), y1: y, y2: y, class: "interval" }, root);
        node("line", { x1: x(low), x2: x(low), y1: y - 6, y2: y + 6, class: "interval" }, root);
        node("line", { x1: x(high), x2: x(high), y1: y - 6, y2: y + 6, class: "interval" }, root);
      }
      if (value !== null) {
        const kappaLike = key !== "percent_agreement" && key !== "percent_agreement_no_ties";
        const dot = node("circle", {
          cx: x(value), cy: y, r: 6, class: kappaLike && value < target ? "estimate below" : "estimate",
        }, root);
        node("title", {}, dot, `${labels[i]}: ${fmt(value)} (95% ${fmt(low)}–${fmt(high)})`);
        node("text", { x: width - right + 8, y: y + 4, class: "value" }, root, fmt(value));
      }
    });
  }

  function heatmap(container, report) {
    const names = report.heatmap.annotators;
    const matrix = report.heatmap.kappa;
    const n = names.length;
    if (!n) { container.textContent = "No annotator pairs yet."; return; }
    const cell = Math.max(5, Math.min(26, Math.floor(640 / n)));
    const labelled = cell >= 12;
    const margin = labelled ? 110 : 10;
    const size = margin + cell * n + 10;
    const legendHeight = margin + 9 * 18 + 10;
    const root = svg(container, size + 170, Math.max(size, legendHeight), "Cohen's kappa for every pair of annotators");
    const counts = {};
    for (const row of report.summary.cohen_kappa) counts[`${row.a}\u0000${row.b}`] = row.n;
    for (let i = 0; i < n; i += 1) {
      if (labelled) {
        node("text", { x: margin - 6, y: margin + cell * i + cell * 0.7, "text-anchor": "end", class: "tick" }, root, names[i]);
        node("text", {
          x: 0, y: 0, class: "tick", "text-anchor": "start",
          transform: `translate(${margin + cell * i + cell * 0.7},${margin - 6}) rotate(-60)`,
        }, root, names[i]);
      }
      for (let j = 0; j < n; j += 1) {
        if (i === j) continue;
        const kappa = matrix[i][j];
        const rect = node("rect", {
          x: margin + cell * j, y: margin + cell * i, width: cell - 1, height: cell - 1,
          fill: kappaColour(kappa, report.kappa_target),
        }, root);
        const shared = counts[`${names[i]}\u0000${names[j]}`] ?? counts[`${names[j]}\u0000${names[i]}`] ?? 0;
        node("title", {}, rect, `${names[i]} × ${names[j]}: κ ${fmt(kappa)}, ${shared} shared comparisons`);
      }
    }
    const legendX = size + 20;
    [-0.2, 0, 0.2, 0.4, 0.6, report.kappa_target, 0.8, 1].forEach((k, i) => {
      node("rect", { x: legendX, y: margin + i * 18, width: 14, height: 14, fill: kappaColour(k, report.kappa_target) }, root);
      node("text", { x: legendX + 20, y: margin + i * 18 + 11, class: "tick" }, root,
        k === report.kappa_target ? `${k} (target)` : String(k));
    });
    node("rect", { x: legendX, y: margin + 8 * 18, width: 14, height: 14, fill: kappaColour(null) }, root);
    node("text", { x: legendX + 20, y: margin + 8 * 18 + 11, class: "tick" }, root, "no shared items");
  }

  function groupChart(container, rows, report, caption) {
    if (!rows.length) { container.textContent = "No data."; return; }
    const width = 720, height = 220, left = 44, right = 16, top = 14, bottom = 40;
    const values = rows.flatMap((r) => [r.fleiss_kappa, r.percent_agreement]).filter((v) => v !== null);
    const ymin = Math.min(0, ...values);
    const y = (v) => top + (1 - (v - ymin) / (1 - ymin)) * (height - top - bottom);
    const step = (width - left - right) / Math.max(rows.length, 1);
    const x = (i) => left + step * (i + 0.5);
    const root = svg(container, width, height, caption);
    for (const tick of [0, 0.25, 0.5, 0.75, 1]) {
      node("line", { x1: left, x2: width - right, y1: y(tick), y2: y(tick), class: "grid-line" }, root);
      node("text", { x: left - 6, y: y(tick) + 4, "text-anchor": "end", class: "tick" }, root, tick.toFixed(2));
    }
    node("line", { x1: left, x2: width - right, y1: y(report.kappa_target), y2: y(report.kappa_target), class: "target-line" }, root);
    let path = "";
    rows.forEach((row, i) => {
      if (row.fleiss_kappa === null) return;
      path += `${path ? "L" : "M"}${x(i).toFixed(1)},${y(row.fleiss_kappa).toFixed(1)}`;
    });
    if (path) node("path", { d: path, class: "kappa-line" }, root);
    const every = Math.ceil(rows.length / 16);
    rows.forEach((row, i) => {
      const tip = `${row.group}: κ ${fmt(row.fleiss_kappa)}, agreement ${fmt(row.percent_agreement)}, ${row.n_items} comparisons`;
      if (row.fleiss_kappa !== null) {
        const dot = node("circle", { cx: x(i), cy: y(row.fleiss_kappa), r: 3.5, class: row.fleiss_kappa < report.kappa_target ? "estimate below" : "estimate" }, root);
        node("title", {}, dot, tip);
      }
      if (row.percent_agreement !== null) {
        const dot = node("rect", { x: x(i) - 3, y: y(row.percent_agreement) - 3, width: 6, height: 6, class: "agreement-dot" }, root);
        node("title", {}, dot, tip);
      }
      if (i % every === 0) {
        node("text", { x: x(i), y: height - bottom + 16, "text-anchor": "middle", class: "tick" }, root, String(row.group));
      }
    });
  }

  function draw(report) {
    shownComputedAt = report.computed_at;
    const byId = (id) => document.getElementById(id);
    if (byId("coefficient-chart")) coefficientChart(byId("coefficient-chart"), report);
    if (byId("kappa-heatmap")) heatmap(byId("kappa-heatmap"), report);
    if (byId("by-batch")) groupChart(byId("by-batch"), report.by_batch, report, "Agreement per batch");
    if (byId("by-cluster")) groupChart(byId("by-cluster"), report.by_cluster, report, "Agreement per prompt cluster");
    if (byId("by-day")) groupChart(byId("by-day"), report.by_day, report, "Agreement per day");
  }

  function offerReload() {
    if (document.getElementById("agreement-reload")) return;
    const note = document.createElement("p");
    note.id = "agreement-reload";
    note.className = "ok";
    const link = document.createElement("a");
    link.href = window.location.href;
    link.textContent = "A newer report is ready: reload";
    note.appendChild(link);
    app.before(note);
  }

  function load(first) {
    fetch(dataUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then((response) => (response.ok ? response.json() : Promise.reject(response.status)))
      .then((data) => {
        if (!data.ready) { window.setTimeout(() => load(false), 3000); return; }
        if (!renderedWithReport) { window.location.reload(); return; }
        if (first) draw(data.report);
        else if (data.report.computed_at !== shownComputedAt) { offerReload(); return; }
        if (data.stale || data.refreshing) window.setTimeout(() => load(false), 5000);
      })
      .catch(() => window.setTimeout(() => load(first), 10000));
  }

  load(true);
})();
