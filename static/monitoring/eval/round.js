// A round's win rate after each rating (items with identical answers count from the start, one tie
// each; the item is the unit), with its 95% band and the 0.5 line (plain SVG); while the round is
// open the chart polls the round's
// progress and redraws as ratings arrive; while the round's judge works it updates its progress.
(function () {
  "use strict";
  const figure = document.getElementById("win-rate-chart");
  const data = document.getElementById("win-rate-over-time");
  if (!figure || !data) return;
  const W = 640, H = 220, pad = 32, ns = "http://www.w3.org/2000/svg";
  const ties = Number.parseInt(figure.dataset.ties || "0", 10);
  const el = (name, attrs) => {
    const node = document.createElementNS(ns, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  };
  function draw(rows) {
    figure.replaceChildren();
    if (!rows.length) { figure.textContent = "No human rating yet: no win rate to draw."; return; }
    const x = (n) => pad + ((W - 2 * pad) * (n - 1)) / Math.max(1, rows.length - 1);
    const y = (v) => H - pad - (H - 2 * pad) * v;
    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img" });
    const band = rows.map((r) => `${x(r.n)},${y(r.high)}`)
      .concat(rows.slice().reverse().map((r) => `${x(r.n)},${y(r.low)}`)).join(" ");
    svg.append(el("polygon", { points: band, fill: "rgba(60,120,200,0.2)" }));
    svg.append(el("line", { x1: pad, x2: W - pad, y1: y(0.5), y2: y(0.5), stroke: "#999", "stroke-dasharray": "4 4" }));
    svg.append(el("polyline", { points: rows.map((r) => `${x(r.n)},${y(r.estimate)}`).join(" "), fill: "none", stroke: "#2060b0", "stroke-width": 2 }));
    for (const v of [0, 0.5, 1]) {
      const label = el("text", { x: 4, y: y(v) + 4, "font-size": 11 });
      label.textContent = String(v);
      svg.append(label);
    }
    const last = rows[rows.length - 1];
    const caption = document.createElement("figcaption");
    caption.dataset.testid = "win-rate-caption";
    // Every point counts the ``ties`` items with identical answers; n counts the ratings.
    const rated = last.items - ties;
    const counted = `${last.n} rating${last.n === 1 ? "" : "s"} of ${rated} item${rated === 1 ? "" : "s"}`
      + (ties ? ` and ${ties} item${ties === 1 ? "" : "s"} with identical answers as ties` : "");
    caption.textContent = `Win rate on ${counted}: ${last.estimate.toFixed(3)} [${last.low.toFixed(3)}, ${last.high.toFixed(3)}]`;
    figure.append(svg, caption);
  }
  let shown = JSON.parse(data.textContent);
  draw(shown);
  const live = (status) => status === "open" || status === "generating";
  const judging = (status) => ["waiting", "queued", "running"].includes(status || "");
  if (!live(figure.dataset.status) && !judging(figure.dataset.judgeStatus)) return;
  const timer = setInterval(async () => {
    try {
      const response = await fetch(figure.dataset.progressUrl, { credentials: "same-origin" });
      if (!response.ok) return;
      const body = await response.json();
      if (body.n !== shown.length) { shown = body.over_time; draw(shown); }
      if (body.judge) {
        const status = document.querySelector("[data-testid=judge-status]");
        const progress = document.querySelector("[data-testid=judge-progress]");
        if (status) status.textContent = body.judge.label;
        if (progress) progress.textContent = `${body.judge.done} / ${body.judge.total}`;
      }
      if (!live(body.status) && !(body.judge && judging(body.judge.status))) clearInterval(timer);
    } catch (error) { /* the next tick tries again */ }
  }, 5000);
})();
