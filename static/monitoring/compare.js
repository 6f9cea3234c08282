// The compare page: fetches each run's metrics.json once and overlays the runs, one line per run,
// on one chart per metric (shared axes), grouped like a run's page.
(function () {
  "use strict";
  const container = document.getElementById("charts");
  const C = window.ConcordCharts;
  if (!container || !C) return;
  const sources = JSON.parse(document.getElementById("compare-sources").textContent);
  const thresholds = JSON.parse(document.getElementById("alert-thresholds").textContent);
  const labels = sources.map(function (s) { return s.label; });
  const charts = {};
  const controls = C.bindControls(charts);
  C.live = charts;  // for the browser tests and the console

  Promise.all(sources.map(function (source) {
    return fetch(source.url, { credentials: "same-origin" }).then(function (r) { return r.json(); });
  })).then(function (results) {
    const meta = {};
    results.forEach(function (data) { Object.assign(meta, data.meta || {}); });
    const names = Object.keys(meta);
    names.forEach(function (name) {
      const box = C.figureFor(container, name, meta[name].group, function (n) { return meta[n].order; });
      const rule = thresholds[name];
      const chart = new C.MetricChart(box, name, labels, rule ? rule.threshold : null, meta[name].unit_interval);
      chart.smoothing = controls.smoothing();
      chart.log = controls.log();
      results.forEach(function (data, i) { chart.setLine(i, data.series[name] || []); });
      box.dataset.runs = String(results.filter(function (d) { return (d.series[name] || []).length; }).length);
      charts[name] = chart;
      chart.render();
    });
    container.dataset.loaded = "true";
  }).catch(function (error) {
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = "Could not load the runs' metrics: " + error;
    container.appendChild(p);
  });
})();
