"""The farm's figure (issue #34): per run, against sqrt(KL) at every evaluation, gold reward, proxy
reward, the share of answers saying the stock phrase and their length in words; each alarm's first
firing and gold's 5% fall marked on the gold panel. matplotlib (the ``bench`` extra).

Run: ``python bench/farm_plot.py bench/results/farm-synthetic.json`` (writes the PNG beside it and
prints the report's tables in Markdown)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLOURS = {"plain": "tab:grey", "mean": "tab:orange", "wco": "tab:green", "uwo": "tab:blue"}
MARKERS = {"rm_vs_human": "v", "hacking_trend": "s", "length": "^", "repetition": "D",
           "disagreement": "P"}  # fmt: skip
PANELS = (("gold", "gold reward"), ("proxy", "proxy reward (the reward model's mean)"),
          ("phrase", "share saying the stock phrase"), ("words", "answer length (words)"))  # fmt: skip


def _colour(run: dict[str, Any]) -> str:
    return COLOURS["plain" if run["pipeline"] == "plain" else run.get("objective", "uwo")]


def plot(report: dict[str, Any], out: Path) -> None:
    """Write the PNG of ``report`` (bench/farm.py's JSON) to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    seen: set[str] = set()
    for run in report["runs"]:
        points = [p for p in run["curve"] if p["kl"] is not None]
        d = {p["step"]: max(p["kl"], 0.0) ** 0.5 for p in points}
        name = "plain" if run["pipeline"] == "plain" else f"concord {run.get('objective', '')}"
        label = None if name in seen else name
        seen.add(name)
        for ax, (key, _) in zip(axes.flat, PANELS, strict=True):
            ax.plot([d[p["step"]] for p in points], [p.get(key) for p in points], "o-",
                    color=_colour(run), alpha=0.6, markersize=3, label=label)  # fmt: skip
        gold = {p["step"]: p["gold"] for p in points}
        for alarm, step in run.get("alarms", {}).get("first_fired", {}).items():
            if step in d:
                axes[0, 0].plot(d[step], gold[step], MARKERS.get(alarm, "x"), color=_colour(run),
                                markersize=9, markerfacecolor="none")  # fmt: skip
        fall = run.get("alarms", {}).get("fall_step")
        if fall in d:
            axes[0, 0].plot(d[fall], gold[fall], "X", color="black", markersize=8)
    for ax, (_, title) in zip(axes.flat, PANELS, strict=True):
        ax.set(title=title, xlabel="sqrt(KL)")
    axes[0, 0].legend(
        fontsize=8, title="X: gold 5% below its peak; hollow: first alarm", title_fontsize=7
    )
    fig.suptitle(f"Concord farm ({report['config']['name']}), seeds {report['seeds']}")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def _step(value: Any) -> str:
    return "-" if value is None else str(value)


def tables(report: dict[str, Any]) -> str:
    """The report as Markdown: per run, where gold peaked and fell 5%, each alarm's first firing
    (steps; "-": never), the stop rules' kept KL against gold's peak KL, and the kept checkpoint's
    gold win rate; then the summary per variant."""
    alarms = ("rm_vs_human", "hacking_trend", "length", "repetition", "disagreement")
    head = ["run", "seed", "gold peak step (KL)", "gold -5% at", *alarms, "stop rules: KL kept "
            "(within 15% / keeps 95%)", "kept", "win rate"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in report["runs"]:
        curve = {row["step"]: row for row in run["curve"]}
        timeline = run["alarms"]
        peak = timeline["peak_step"]
        rules = "; ".join(
            f"{v['rule']} {v['kl']:.2f} ({'y' if v['within_kl'] else 'n'}/"
            f"{'y' if v['keeps_gold'] else 'n'})"
            for v in run["stop_rules"]
        )
        name = "plain" if run["pipeline"] == "plain" else f"concord {run['objective']}"
        cells = [name, str(run["seed"]), f"{peak} ({curve[peak]['kl']:.2f})",
                 _step(timeline["fall_step"]),
                 *(_step(timeline["first_fired"].get(a)) for a in alarms), rules,
                 "base (rejected)" if run.get("decision") == "reject" else str(run["kept_step"]),
                 f"{run['gold_win_rate']:.2f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| variant | gold win rate | gold reward | labels | CPU s |",
        "|---|---|---|---|---|",
    ]
    for name, row in report["summary"].items():
        cells = [f"{row[k]['mean']:.2f} [{row[k]['low']:.2f}, {row[k]['high']:.2f}]"
                 for k in ("gold_win_rate", "gold_reward", "labels", "cpu_s")]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    for name in argv:
        path = Path(name)
        report = json.loads(path.read_text())
        print(tables(report))
        plot(report, path.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
