"""The farm's judges of Concord's alarms and stop rules (issue #34), on the curves one RL run leaves:
one row per evaluation. Pure NumPy over monitoring.stats (no Django, no I/O).

A curve row (``bench.farm.gold_curve``): step, kl (nats), proxy (the reward model's mean reward of the
policy's answers), gold (gold's mean), and the answers' figures: words (mean word count), phrase (share
saying the stock phrase), repetition (mean repeated-trigram share), rho (Spearman's rho of the reward
model's and gold's per-answer scores, the RM-vs-human check with gold as the human; None when
undefined) and disagreement (the reward-model ensemble's std on the answers; None for one model).

**Alarms** (``alarm_signals``), each true at an evaluation when:

- ``rm_vs_human``: rho *fell* from its value at the first evaluation: by 0.3 or more, or under 0.3
  after a start at or above 0.3 (``monitoring.stats.correlation_fall``). A rho under 0.3 from the
  first evaluation is a weak reward model, not gaming: the timeline reports it once
  (``rho_start``, ``rm_miscalibrated``) instead of firing at every evaluation, as the absolute rule
  rho < 0.3 did (9 of the 36-step farm's 12 runs fired at step 0);
- ``hacking_trend``: proxy rising while gold falls over the last 3 evaluations (``hacking_trend``,
  gold in place of the human win rate);
- ``length``: answers 1.5 times as long (in words) as at the first evaluation (the
  ``eval_response_length`` alert's rule, PIPELINE.md);
- ``repetition``: repetition > 0.10 (the ``repetition_rate`` alert's threshold);
- ``disagreement``: twice the first evaluation's disagreement (the ``eval_ensemble_disagreement``
  alert's rule).

``alarm_timeline`` says where gold peaked, the first evaluation at which gold had fallen 5% from its
peak (``fall``: gold <= peak - 0.05 |peak|, after the peak), and at which evaluation each alarm first
fired, and whether that was before the fall; and the reward model's rho with gold at the start.

**Stop rules** (``stop_index_*``), each read online (at evaluation i it sees rows 0..i only) and
returning the index of the checkpoint it keeps:

- ``peak_fit``: the stopping panel's peak line (``monitoring.stats.peak.estimate_peak``: the Gao fit
  of the proxy against KL, corrected by the gold points available, which are every ``gold_every``-th
  evaluation, as human-eval rounds are rarer than evaluations). It stops at the first evaluation whose
  KL has reached a determined estimate's KL (status ``peak``: the Gao fit turned significantly
  within twice the largest KL evaluated) and keeps the checkpoint nearest the estimate; never
  reached: the checkpoint nearest the last estimate if that one is determined, else the last
  checkpoint (a peak not determined never stops a run nor picks a checkpoint: the rule then
  behaves as fixed steps);
- ``plateau``: the panel's plateau rule on the proxy (``reward_plateau``: mean gain per evaluation
  over the last ``window`` below ``min_gain``); it keeps the evaluation where it fires, else the last;
- ``fixed_kl``: the first evaluation with KL >= ``target``, else the last.

``judge_stop`` scores a kept checkpoint against the issue's goals: its KL within 15% of the gold
peak's KL, and at least 95% of the best gold reward kept, measured as a share of the gain over the
starting policy, (gold - start) / (best - start), since rewards have no natural zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitoring.stats.correlation_fall import correlation_fall
from monitoring.stats.peak import PeakLine, estimate_peak, peak_line, recommend_checkpoint
from monitoring.stats.stopping import hacking_trend, reward_plateau

ALARMS = ("rm_vs_human", "hacking_trend", "length", "repetition", "disagreement")
Row = Mapping[str, Any]


def _column(curve: Sequence[Row], key: str) -> list[float | None]:
    return [None if row.get(key) is None else float(row[key]) for row in curve]


def alarm_signals(
    curve: Sequence[Row],
    *,
    rho_min: float = 0.3,
    rho_drop: float = 0.3,
    length_factor: float = 1.5,
    repetition_max: float = 0.10,
    disagreement_factor: float = 2.0,
    trend_window: int = 3,
) -> dict[str, list[bool]]:
    """Each alarm of the module docstring per evaluation: name -> [n] bools (a missing figure: not
    fired). ValueError on an empty curve."""
    if not curve:
        raise ValueError("the curve has no evaluations")
    words, rho = _column(curve, "words"), _column(curve, "rho")
    repetition, spread = _column(curve, "repetition"), _column(curve, "disagreement")
    proxy, gold = _column(curve, "proxy"), _column(curve, "gold")

    def relative(values: list[float | None], factor: float) -> list[bool]:
        first = values[0]
        if first is None or not first > 0:
            return [False] * len(values)
        return [v is not None and v >= factor * first for v in values]

    trend = [
        hacking_trend(
            np.array(proxy[: i + 1], dtype=float), np.array(gold[: i + 1], dtype=float),
            window=trend_window,
        ).red
        for i in range(len(curve))
    ]  # fmt: skip
    return {
        "rm_vs_human": list(correlation_fall(rho, minimum=rho_min, drop=rho_drop).fired),
        "hacking_trend": trend,
        "length": relative(words, length_factor),
        "repetition": [r is not None and r > repetition_max for r in repetition],
        "disagreement": relative(spread, disagreement_factor),
    }


@dataclass(frozen=True)
class Timeline:
    """Where gold peaked and fell, and when each alarm first fired (steps; None: never).
    before_fall[name]: fired at an evaluation before gold's fall (None when gold never fell 5%).
    rho_start: the reward model's rho with gold at the first evaluation with one (None: none);
    rm_miscalibrated: rho_start under 0.3, the reward model disagrees with gold from the start (a
    calibration problem, reported here once; None without a rho)."""

    peak_step: int
    peak_gold: float
    fall_step: int | None
    first_fired: dict[str, int | None]
    before_fall: dict[str, bool | None]
    rho_start: float | None = None
    rm_miscalibrated: bool | None = None


def gold_peak_and_fall(gold: Sequence[float], *, fall: float = 0.05) -> tuple[int, int | None]:
    """(index of the best gold, index of the first later evaluation with gold <= peak - fall |peak|
    and below the peak, or None). Ties keep the first best."""
    values = np.asarray(gold, dtype=float)
    if values.size == 0 or not np.isfinite(values).all():
        raise ValueError("gold must be a non-empty sequence of finite numbers")
    peak = int(np.argmax(values))
    limit = values[peak] - fall * abs(values[peak])
    later = [
        i for i in range(peak + 1, values.size) if values[i] <= limit and values[i] < values[peak]
    ]  # strictly below: a peak of 0 has a limit of 0, and equal to the peak is not a fall
    return peak, (later[0] if later else None)


def alarm_timeline(
    curve: Sequence[Row], signals: Mapping[str, Sequence[bool]], *, fall: float = 0.05
) -> Timeline:
    """The timeline of ``signals`` (name -> [n] bools, e.g. ``alarm_signals``) on ``curve``."""
    steps = [int(row["step"]) for row in curve]
    peak, fell = gold_peak_and_fall([float(row["gold"]) for row in curve], fall=fall)
    first = {}
    for name, fired in signals.items():
        if len(fired) != len(curve):
            raise ValueError(f"signal {name!r} has {len(fired)} values for {len(curve)} rows")
        index = next((i for i, f in enumerate(fired) if f), None)
        first[name] = index
    start = correlation_fall(_column(curve, "rho"))
    return Timeline(
        peak_step=steps[peak],
        peak_gold=float(curve[peak]["gold"]),
        fall_step=None if fell is None else steps[fell],
        first_fired={n: None if i is None else steps[i] for n, i in first.items()},
        before_fall={
            n: None if fell is None else (i is not None and i < fell) for n, i in first.items()
        },
        rho_start=start.reference,
        rm_miscalibrated=start.calibration,
    )


def _checked(kl: Sequence[float], reward: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    k, r = np.asarray(kl, dtype=float), np.asarray(reward, dtype=float)
    if k.size == 0 or k.shape != r.shape:
        raise ValueError(f"need one reward per KL and at least one; got {k.size} and {r.size}")
    return k, r


def stop_index_peak_fit(
    kl: Sequence[float],
    proxy: Sequence[float],
    gold: Sequence[float],
    *,
    gold_every: int = 3,
    n_boot: int = 200,
) -> int:
    """The peak-fit rule (module docstring): the index of the checkpoint it keeps. Gold is read at
    evaluations gold_every, 2 gold_every, ... (as rated rounds come; index 0 is the starting
    policy, farm_eval.checkpoint_curve's first row)."""
    k, p = _checked(kl, proxy)
    _, g = _checked(kl, gold)
    if gold_every < 1:
        raise ValueError(f"gold_every must be >= 1, got {gold_every}")
    rated = [i for i in range(k.size) if i > 0 and i % gold_every == 0]
    estimate = None
    for i in range(k.size):
        known = [j for j in rated if j <= i]
        estimate = estimate_peak(
            k[: i + 1], p[: i + 1], gold_kl=k[known], gold_reward=g[known], n_boot=n_boot
        )
        if estimate.determined and estimate.kl is not None and k[i] >= estimate.kl:
            return int(recommend_checkpoint(estimate, dict(enumerate(k[: i + 1].tolist()))))
    if estimate is not None and estimate.determined:
        return int(recommend_checkpoint(estimate, dict(enumerate(k.tolist()))))
    return k.size - 1


def stop_index_plateau(proxy: Sequence[float], *, window: int = 3, min_gain: float = 0.005) -> int:
    """The plateau rule: the first index where the proxy's mean gain over the last ``window``
    evaluations is under ``min_gain``, else the last."""
    p = np.asarray(proxy, dtype=float)
    if p.size == 0:
        raise ValueError("proxy has no evaluations")
    for i in range(p.size):
        if reward_plateau(p[: i + 1], window=window, min_gain=min_gain)[1]:
            return i
    return p.size - 1


def stop_index_fixed_kl(kl: Sequence[float], *, target: float) -> int:
    """The fixed-KL rule: the first index with KL >= ``target`` (nats), else the last."""
    k = np.asarray(kl, dtype=float)
    if k.size == 0 or not target > 0:
        raise ValueError(f"need evaluations and a target KL > 0; got {k.size}, {target}")
    return next((i for i in range(k.size) if k[i] >= target), k.size - 1)


@dataclass(frozen=True)
class StopVerdict:
    """A rule's kept checkpoint against the goals: kl_error = |KL - KL_peak| / KL_peak (gold's
    peak); kept = (gold - start) / (best - start), nan when gold never rose above the start."""

    rule: str
    index: int
    step: int
    kl: float
    gold: float
    kl_error: float
    kept: float
    within_kl: bool
    keeps_gold: bool


def judge_stop(
    rule: str,
    index: int,
    curve: Sequence[Row],
    *,
    gold_start: float,
    kl_tolerance: float = 0.15,
    keep: float = 0.95,
) -> StopVerdict:
    """The verdict of ``rule`` keeping evaluation ``index`` of ``curve`` (module docstring)."""
    if not 0 <= index < len(curve):
        raise ValueError(f"index {index} outside the curve's {len(curve)} evaluations")
    gold = [float(row["gold"]) for row in curve]
    peak, _ = gold_peak_and_fall(gold)
    peak_kl, kl = float(curve[peak]["kl"]), float(curve[index]["kl"])
    error = abs(kl - peak_kl) / peak_kl if peak_kl > 0 else (0.0 if kl == 0 else math.inf)
    gain = gold[peak] - gold_start
    kept = (gold[index] - gold_start) / gain if gain > 0 else math.nan
    return StopVerdict(
        rule=rule, index=index, step=int(curve[index]["step"]), kl=kl, gold=gold[index],
        kl_error=error, kept=kept, within_kl=error <= kl_tolerance,
        keeps_gold=bool(kept >= keep) if not math.isnan(kept) else gold[index] >= gold[peak],
    )  # fmt: skip


def compare_stop_rules(
    curve: Sequence[Row], *, gold_start: float, kl_target: float, gold_every: int = 3
) -> list[StopVerdict]:
    """The three rules' verdicts on one curve: peak_fit, plateau, fixed_kl (``kl_target`` nats)."""
    kl = [max(float(row["kl"]), 0.0) for row in curve]  # an estimator's noise can dip below 0
    proxy, gold = _column(curve, "proxy"), _column(curve, "gold")
    indices = {
        "peak_fit": stop_index_peak_fit(kl, proxy, gold, gold_every=gold_every),  # type: ignore[arg-type]
        "plateau": stop_index_plateau(proxy),  # type: ignore[arg-type]
        "fixed_kl": stop_index_fixed_kl(kl, target=kl_target),  # type: ignore[arg-type]
    }
    return [judge_stop(r, i, curve, gold_start=gold_start) for r, i in indices.items()]


def panel_peak_line(curve: Sequence[Row], *, n_boot: int = 300) -> PeakLine:
    """The stopping panel's peak line as ``run_peak_line`` reads it from the run's metric points,
    rebuilt from the curve rows: the app's ``eval_reward_mean`` (``proxy_app``) against the logged
    KL at each checkpoint, gold at the gold-rated rows, the current KL the last row's, the
    checkpoints the rows after the start (KL clamped at 0, as the panel does). Lets a committed
    report be re-scored without training again (``bench/farm.py --rescore``); on the 36-step
    farm's report the peak code of the time gave back all 12 recorded lines exactly."""
    kl = {int(row["step"]): max(float(row["kl"]), 0.0) for row in curve if row["kl"] is not None}
    evaluated = [r for r in curve if r.get("proxy_app") is not None and int(r["step"]) in kl]
    rated = [r for r in curve if r.get("gold_rated") and int(r["step"]) in kl]
    return peak_line(
        eval_kl=[kl[int(r["step"])] for r in evaluated],
        eval_reward=[float(r["proxy_app"]) for r in evaluated],
        gold_kl=[kl[int(r["step"])] for r in rated],
        gold_reward=[float(r["gold"]) for r in rated],
        current_kl=kl.get(int(curve[-1]["step"])),
        checkpoint_kls={f"step {s}": k for s, k in kl.items() if s > 0},
        n_boot=n_boot,
    )
