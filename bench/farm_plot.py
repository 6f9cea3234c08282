"""The farm's figure (issue #34): per run, against sqrt(KL) at every evaluation, gold reward, proxy
reward, the share of answers saying the stock phrase and their length in words; each alarm's first
firing and gold's 5% fall marked on the gold panel. matplotlib (the ``bench`` extra).

Run: ``python bench/farm_plot.py bench/results/farm-synthetic.json`` (writes the PNG beside it)."""

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


def main(argv: list[str]) -> int:
    for name in argv:
        path = Path(name)
        plot(json.loads(path.read_text()), path.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
