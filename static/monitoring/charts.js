// Metric charts on uPlot (static/vendor/uplot, MIT), shared by a run's page and the compare page.
// One chart per metric, one line per run; hover shows the values in the legend; drag to zoom into
// steps, double-click to zoom out; optional exponential smoothing and log scale; alert thresholds
// as dashed red lines. Served from our origin and building the DOM without inline style
// attributes, so it runs under the Content-Security-Policy (uPlot sets sizes through the CSSOM).
(function () {
  "use strict";
  const COLOURS = ["#2f5bd3", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8590c", "#0b7285", "#5c940d", "#c2255c"];


  // A value as the pages write it (the same as the server's ``metric_value`` filter): 4 decimals
  // with trailing zeros dropped; below 0.001 or from 100000 on, 4 significant digits in
  // scientific notation, trailing zeros dropped, with a two-digit exponent: 5e-06, 1.25e+05.
  function fmt(v) {
    if (v === null || v === undefined || !Number.isFinite(v)) return "–";
    const a = Math.abs(v);
    if (a !== 0 && (a < 0.001 || a >= 100000)) {
      const parts = v.toExponential(3).split("e");
      const mantissa = parts[0].replace(/\.?0+$/, "");
      const exponent = Number(parts[1]);
      return mantissa + "e" + (exponent < 0 ? "-" : "+") + String(Math.abs(exponent)).padStart(2, "0");
    }
    return String(Math.round(v * 10000) / 10000);
  }

  // Series a run sets rather than measures (schedules): smoothing would bend them, so they are
  // always drawn as logged.
  const NOT_SMOOTHED = /(^|\/)(learning_rate|lr|kl_coef|epoch)$/;

  // Debiased exponential moving average (TensorBoard's smoothing): weight in [0, 1).
  function smooth(values, weight) {
    if (!weight) return values.slice();
    let last = 0, n = 0;
    return values.map(function (v) {
      if (v === null || !Number.isFinite(v)) return v;
      n += 1;
      last = last * weight + (1 - weight) * v;
      return last / (1 - Math.pow(weight, n));
    });
  }

  // The y range of finite values (and a threshold): a flat series gets +-10% of its value (or
  // +-0.1 around 0) instead of +-0.5; a series that never goes below 0 is not drawn below 0, and a
  // share (``unitInterval``: accuracy, rates, fractions) not above 1.
  function yRange(values, threshold, log, unitInterval) {
    const ys = values.filter(function (v) { return v !== null && Number.isFinite(v); });
    if (threshold !== undefined && threshold !== null) ys.push(threshold);
    if (!ys.length) return [0, 1];
    let lo = Math.min.apply(null, ys), hi = Math.max.apply(null, ys);
    if (log) return [lo / 1.25, hi * 1.25];
    // Flat up to rounding (a smoothed copy of one value differs from it in the last bit).
    const flat = hi - lo <= Math.max(Math.abs(hi), Math.abs(lo)) * 1e-9;
    const pad = !flat ? (hi - lo) * 0.06 : (Math.abs(hi) > 0 ? Math.abs(hi) * 0.1 : 0.1);
    const nonNegative = lo >= 0, atMostOne = unitInterval && hi <= 1;
    lo -= pad; hi += pad;
    if (nonNegative && lo < 0) lo = 0;
    if (atMostOne && hi > 1) hi = 1;
    return [lo, hi];
  }

  // The y axis's width in CSS pixels: its longest tick label as the canvas measures it, plus
  // the tick and the gap (uPlot's axis-autosize recipe), so no label is cut on the left.
  function yAxisSize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;  // settled: stop uPlot's size/tick cycle
    let size = axis.ticks.size + axis.gap;
    const longest = (values || []).reduce(function (a, v) { return v.length > a.length ? v : a; }, "");
    if (longest) {
      u.ctx.font = axis.font[0];
      size += u.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
    }
    return Math.max(40, Math.ceil(size) + 2);
  }

  function xRange(xs) {
    if (!xs.length) return [0, 1];
    const lo = xs[0], hi = xs[xs.length - 1];
    return hi > lo ? [lo, hi] : [lo - 1, hi + 1];
  }

  // Several [[step, value], ...] lines on the union of their steps (null where a line has none).
  function align(lines) {
    const steps = {};
    lines.forEach(function (points) { points.forEach(function (p) { steps[p[0]] = true; }); });
    const xs = Object.keys(steps).map(Number).sort(function (a, b) { return a - b; });
    const index = {};
    xs.forEach(function (x, i) { index[x] = i; });
    const ys = lines.map(function (points) {
      const column = new Array(xs.length).fill(null);
      points.forEach(function (p) { column[index[p[0]]] = p[1] === null ? null : Number(p[1]); });
      return column;
    });
    return [xs].concat(ys);
  }

  // A chart of one metric: ``box`` a <figure>, ``labels`` one per line, ``threshold`` or null,
  // ``unitInterval`` when the metric is a share between 0 and 1.
  function MetricChart(box, name, labels, threshold, unitInterval) {
    this.box = box;
    this.unitInterval = Boolean(unitInterval);
    this.name = name;
    this.labels = labels;
    this.threshold = threshold;
    this.lines = labels.map(function () { return []; });
    this.smoothing = 0;
    this.smoothable = !NOT_SMOOTHED.test(name);
    this.log = false;
    this.zoomed = false;
    this.plot = null;
    this.holder = document.createElement("div");
    this.holder.className = "plot";
    box.appendChild(this.holder);
    this.note = document.createElement("p");
    this.note.className = "chart-note";
    box.appendChild(this.note);
  }

  MetricChart.prototype.setLine = function (i, points) {
    this.lines[i] = points;
  };

  MetricChart.prototype.points = function () {
    return this.lines.reduce(function (n, l) { return n + l.length; }, 0);
  };

  // The smoothing this chart applies: the slider's, or 0 for a schedule (NOT_SMOOTHED).
  MetricChart.prototype.appliedSmoothing = function () {
    return this.smoothable ? this.smoothing : 0;
  };

  MetricChart.prototype.data = function () {
    const aligned = align(this.lines);
    const smoothing = this.appliedSmoothing();
    const out = [aligned[0]];
    aligned.slice(1).forEach(function (column) {
      out.push(smoothing ? smooth(column, smoothing) : column);
    });
    if (smoothing) aligned.slice(1).forEach(function (column) { out.push(column); });
    return out;
  };

  MetricChart.prototype.canLog = function () {
    return this.lines.every(function (l) { return l.every(function (p) { return !Number.isFinite(p[1]) || p[1] > 0; }); });
  };

  MetricChart.prototype.options = function (width, data) {
    const self = this;
    const useLog = this.log && this.canLog();
    const sparse = data[0].length <= 60;
    const series = [{ label: "step", value: function (u, v) { return v === null ? "–" : String(v); } }];
    const smoothing = this.appliedSmoothing();
    this.labels.forEach(function (label, i) {
      series.push({
        label: smoothing ? label + " (smoothed)" : label,
        stroke: COLOURS[i % COLOURS.length],
        width: 1.8,
        spanGaps: true,
        points: { show: sparse, size: data[0].length === 1 ? 8 : 5 },
        value: function (u, v) { return fmt(v); },
      });
    });
    if (smoothing) {
      this.labels.forEach(function (label, i) {
        series.push({
          label: label + " (raw)",
          stroke: COLOURS[i % COLOURS.length] + "55",
          width: 1,
          spanGaps: true,
          points: { show: sparse, size: 4 },
          value: function (u, v) { return fmt(v); },
        });
      });
    }
    return {
      width: width,
      height: 190,
      series: series,
      legend: { live: true },
      cursor: { drag: { x: true, y: false, setScale: true } },
      scales: {
        x: {
          time: false,
          range: function (u, lo, hi) {
            const full = xRange(u.data[0]);
            // A narrower window than the data is the reader's zoom: keep it.
            if (lo !== null && hi !== null && hi > lo && (lo > full[0] || hi < full[1])) return [lo, hi];
            return full;
          },
        },
        y: {
          distr: useLog ? 3 : 1,
          log: 10,
          range: function (u) {
            // Every value; when zoomed, those inside the visible steps.
            const xs = u.data[0], x0 = u.scales.x.min, x1 = u.scales.x.max;
            const inside = self.zoomed && x0 !== null && x0 !== undefined;
            const shown = [];
            for (let s = 1; s < u.data.length; s++) {
              for (let i = 0; i < xs.length; i++) {
                if (!inside || (xs[i] >= x0 && xs[i] <= x1)) shown.push(u.data[s][i]);
              }
            }
            return yRange(shown, self.threshold, useLog, self.unitInterval);
          },
        },
      },
      axes: [
        { label: "step", size: 40, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000], values: function (u, ticks) { return ticks.map(String); } },
        { size: yAxisSize, values: function (u, ticks) { return ticks.map(fmt); } },
      ],
      hooks: {
        setSelect: [function (u) { if (u.select.width > 0) self.zoomed = true; }],
        draw: [function (u) {
          if (self.threshold === null || self.threshold === undefined) return;
          const y = u.valToPos(self.threshold, "y", true);
          if (!Number.isFinite(y)) return;
          const ctx = u.ctx;
          ctx.save();
          ctx.strokeStyle = "#b3261e";
          ctx.setLineDash([6, 4]);
          ctx.lineWidth = 1.5;
          ctx.beginPath();
          ctx.moveTo(u.bbox.left, y);
          ctx.lineTo(u.bbox.left + u.bbox.width, y);
          ctx.stroke();
          ctx.restore();
        }],
      },
    };
  };

  MetricChart.prototype.render = function () {
    const data = this.data();
    this.box.dataset.points = String(this.points());
    const notes = [];
    if (this.threshold !== null && this.threshold !== undefined) notes.push("alert threshold " + fmt(this.threshold));
    if (this.log && !this.canLog()) notes.push("log scale needs positive values: linear");
    if (this.smoothing && !this.smoothable) notes.push("a schedule: never smoothed");
    this.note.textContent = notes.join(" · ");
    const mode = [this.appliedSmoothing() > 0, this.log && this.canLog()].join();
    if (this.plot && this.mode === mode) {
      this.plot.setData(data, !this.zoomed);
      return;
    }
    if (this.plot) this.plot.destroy();
    this.mode = mode;
    const width = Math.max(260, this.holder.clientWidth || this.box.clientWidth || 320);
    this.plot = new window.uPlot(this.options(width, data), data, this.holder);
    const self = this;
    this.plot.over.addEventListener("dblclick", function () { self.zoomed = false; });
    // The figure was just laid out: take its real width.
    window.requestAnimationFrame(function () { self.resize(); });
  };

  MetricChart.prototype.resize = function () {
    if (!this.plot) return;
    const width = Math.max(260, this.holder.clientWidth);
    if (Math.abs(width - this.plot.width) > 4) this.plot.setSize({ width: width, height: 190 });
  };

  // Last, best (by direction 'min' / 'max'), min and max of a [[step, value], ...] series.
  function summarise(points, direction) {
    const finite = points.filter(function (p) { return Number.isFinite(p[1]); });
    if (!finite.length) return null;
    const last = finite[finite.length - 1];
    let lo = finite[0], hi = finite[0];
    finite.forEach(function (p) { if (p[1] < lo[1]) lo = p; if (p[1] > hi[1]) hi = p; });
    const best = direction === "min" ? lo : direction === "max" ? hi : null;
    return { last: last, best: best, min: lo[1], max: hi[1], count: points.length };
  }

  // The smoothing slider and log-scale box drive every chart in ``charts`` (a {name: chart} map).
  function bindControls(charts) {
    const slider = document.getElementById("smoothing");
    const output = document.getElementById("smoothing-value");
    const log = document.getElementById("log-scale");
    if (slider) slider.addEventListener("input", function () {
      if (output) output.textContent = slider.value;
      Object.keys(charts).forEach(function (k) { charts[k].smoothing = Number(slider.value); charts[k].render(); });
    });
    if (log) log.addEventListener("change", function () {
      Object.keys(charts).forEach(function (k) { charts[k].log = log.checked; charts[k].render(); });
    });
    let pending = null;
    window.addEventListener("resize", function () {
      window.clearTimeout(pending);
      pending = window.setTimeout(function () {
        Object.keys(charts).forEach(function (k) { charts[k].resize(); });
      }, 150);
    });
    return {
      smoothing: function () { return slider ? Number(slider.value) : 0; },
      log: function () { return log ? log.checked : false; },
    };
  }

  // A <figure class="chart"> for ``name`` in its group's section (shown once it has a chart),
  // placed by ``rank`` (a number per metric name; ties alphabetically).
  function figureFor(container, name, group, rank) {
    const section = container.querySelector('.chart-group[data-group="' + group + '"]') ||
      container.querySelector('.chart-group[data-group="other"]');
    const grid = section.querySelector(".chart-grid");
    section.hidden = false;
    const box = document.createElement("figure");
    box.className = "chart";
    box.dataset.metric = name;
    const caption = document.createElement("figcaption");
    caption.textContent = name;
    box.appendChild(caption);
    const after = Array.prototype.find.call(grid.children, function (other) {
      const a = rank(name), b = rank(other.dataset.metric);
      return a < b || (a === b && name < other.dataset.metric);
    });
    grid.insertBefore(box, after || null);
    return box;
  }

  window.ConcordCharts = {
    MetricChart: MetricChart, fmt: fmt, smooth: smooth, yRange: yRange, align: align,
    NOT_SMOOTHED: NOT_SMOOTHED,
    summarise: summarise, bindControls: bindControls, figureFor: figureFor,
  };
})();
