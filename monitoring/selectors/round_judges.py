"""Reads of a round's judge: its progress, its agreement with the reviewers on the items both
rated, and the round's prediction-powered estimates (monitoring/stats/ppi.py) beside the human-only
ones, with the estimate the stopping panel uses and why (``ppi.choose_estimate``).

Per item i of the round's N items:
- the judge's outcome f_i: the mean of its parsed verdicts in the two orders (1 the checkpoint
  better, 0.5 tie, 0 the baseline), 0.5 when neither order parsed (a fixed rule that does not look
  at the reviewers, so the estimate stays unbiased);
- the reviewers' outcome y_i: the mean of the item's ratings, NaN while no reviewer rated it;
- the inclusion probability: the item's, except for items whose two answers are identical, which
  are known ties (y = 0.5, probability 1) whether or not reviewers were sent them.
Usefulness is over the items whose answers differ; the judge's is its 1-5 rating of the
checkpoint's answer (checkpoint-first order; items it did not rate get the mean of those it did).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from annotation.agreement import cohen_kappa
from monitoring.models import EvalJudgeVerdict, EvalRound
from monitoring.selectors.eval_rounds import (
    OUTCOME,
    identical_item_ids,
    round_judgements,
    round_outcomes,
)
from monitoring.stats import stopping, win_rates
from monitoring.stats.intervals import EstimateChoice, Interval
from monitoring.stats.ppi import (
    NO_HUMAN_RATING,
    PPIEstimate,
    choose_estimate,
    ppi_mean,
)

# PIPELINE.md's agreement target ("kappa above 0.7"): a judge is trusted as far as an annotator.
DEFAULT_KAPPA_THRESHOLD = 0.7


def _judge_preference(preferences: list[str]) -> str:
    """The judge's verdict on an item from its parsed verdicts: the one order's, or both orders'
    when they agree, else a tie (its verdict flipped when the answers swapped places)."""
    return preferences[0] if len(set(preferences)) == 1 else "tie"


def round_judge_agreement(round_: EvalRound) -> dict[str, Any]:
    """Cohen's kappa between the judge and the reviewers on the items both rated: each rating
    paired with the judge's verdict on its item (a, b, tie). Returns {kappa (NaN when not
    measurable), overlap_items, pairs, agreement (share of equal pairs), swap_flips (items whose two
    parsed orders disagree), unparsed (answers that could not be read)}."""
    verdicts: dict[int, list[str]] = defaultdict(list)
    unparsed = 0
    for item_id, preference in EvalJudgeVerdict.objects.filter(
        item__round=round_, judge_id=round_.judge_id
    ).values_list("item_id", "preference"):
        if preference:
            verdicts[item_id].append(preference)
        else:
            unparsed += 1
    humans, machine, items = [], [], set()
    for judgement in round_judgements(round_):
        item_id = judgement.assignment.item_id
        if verdicts.get(item_id):
            humans.append(judgement.preference)
            machine.append(_judge_preference(verdicts[item_id]))
            items.add(item_id)
    kappa = cohen_kappa(humans, machine) if humans else float("nan")
    return {
        "kappa": kappa,
        "overlap_items": len(items),
        "pairs": len(humans),
        "agreement": float(np.mean(np.array(humans) == np.array(machine))) if humans else None,
        "swap_flips": sum(len(set(v)) > 1 for v in verdicts.values() if len(v) == 2),
        "unparsed": unparsed,
    }


def _round_arrays(round_: EvalRound) -> dict[str, np.ndarray]:
    """Per item (by position): judge outcome, human outcome (NaN unrated), inclusion probability,
    judge usefulness (NaN none), human usefulness (NaN unrated), identical answers."""
    items = list(round_.items.order_by("position").values("pk", "inclusion_probability"))
    index = {row["pk"]: k for k, row in enumerate(items)}
    n = len(items)
    judge_outcomes: list[list[float]] = [[] for _ in range(n)]
    judge_useful = np.full(n, np.nan)
    for item_id, preference, usefulness in EvalJudgeVerdict.objects.filter(
        item__round=round_, judge_id=round_.judge_id
    ).values_list("item_id", "preference", "usefulness"):
        if preference:
            judge_outcomes[index[item_id]].append(OUTCOME[preference])
        if usefulness is not None:
            judge_useful[index[item_id]] = usefulness
    human_outcomes: list[list[float]] = [[] for _ in range(n)]
    human_useful: list[list[float]] = [[] for _ in range(n)]
    for judgement in round_judgements(round_):
        k = index[judgement.assignment.item_id]
        human_outcomes[k].append(judgement.outcome)
        human_useful[k].append(judgement.usefulness)
    identical = np.zeros(n, dtype=bool)
    for pk in identical_item_ids(round_):
        identical[index[pk]] = True
    return {
        "judge": np.array([np.mean(v) if v else 0.5 for v in judge_outcomes]),
        "human": np.array([np.mean(v) if v else np.nan for v in human_outcomes]),
        "probability": np.array([row["inclusion_probability"] for row in items], dtype=float),
        "judge_useful": judge_useful,
        "human_useful": np.array([np.mean(v) if v else np.nan for v in human_useful]),
        "identical": identical,
    }


def round_ppi(round_: EvalRound) -> dict[str, Any]:
    """The round's prediction-powered estimates. Returns {win_rate, usefulness: PPIEstimate or
    None, win_rate_note, usefulness_note: why one is missing ("" when present), n_items,
    n_rated_items}."""
    a = _round_arrays(round_)
    human = np.where(a["identical"], 0.5, a["human"])
    probability = np.where(a["identical"], 1.0, a["probability"])
    rated = int((~np.isnan(a["human"]) & ~a["identical"]).sum())
    win_rate = usefulness = None
    win_note = useful_note = ""
    if rated < 2:  # identical answers are known ties, not human ratings: they alone give none
        win_note = "needs human ratings of at least 2 items whose answers differ"
    else:
        win_rate = ppi_mean(a["judge"], human, inclusion_probability=probability, bounds=(0, 1))
    differ = ~a["identical"]
    judge_useful, human_useful = a["judge_useful"][differ], a["human_useful"][differ]
    if np.isnan(judge_useful).all():
        useful_note = "the judge gives no usefulness ratings (its template does not ask for them)"
    elif (~np.isnan(human_useful)).sum() < 2:
        useful_note = "needs usefulness ratings of at least 2 items"
    else:
        filled = np.where(np.isnan(judge_useful), np.nanmean(judge_useful), judge_useful)
        usefulness = ppi_mean(
            filled,
            human_useful,
            inclusion_probability=a["probability"][differ],
            bounds=(1, 5),
        )
    return {
        "win_rate": win_rate,
        "usefulness": usefulness,
        "win_rate_note": win_note,
        "usefulness_note": useful_note,
        "n_items": len(human),
        "n_rated_items": rated,
    }


def _no_ppi(classical: Interval, why: str) -> EstimateChoice:
    if classical.n == 0:
        return EstimateChoice("human", classical, NO_HUMAN_RATING)
    return EstimateChoice(
        "human",
        classical,
        f"Human-only estimate {classical.estimate:.3f} [{classical.low:.3f}, "
        f"{classical.high:.3f}] used: {why}.",
    )


def _choice(
    classical: Interval,
    estimate: PPIEstimate | None,
    note: str,
    agreement: dict[str, Any] | None,
    kappa_threshold: float,
) -> EstimateChoice:
    if agreement is not None and estimate is None:
        return _no_ppi(classical, f"no prediction-powered estimate ({note})")
    return choose_estimate(
        classical=estimate.classical if estimate is not None else classical,
        ppi=estimate,
        judge_kappa=None if agreement is None else agreement["kappa"],
        overlap_items=0 if agreement is None else agreement["overlap_items"],
        kappa_threshold=kappa_threshold,
    )


def round_estimates(
    round_: EvalRound,
    *,
    win_rate: Interval,
    usefulness: Interval,
    kappa_threshold: float = DEFAULT_KAPPA_THRESHOLD,
) -> dict[str, Any]:
    """The estimates the stopping panel uses for the round, each an ``EstimateChoice`` saying which
    and why. win_rate, usefulness: the human-only intervals the panel shows when the round has no
    judge (with a judge the human-only intervals are PPI's classical ones, so the two differ only by
    the judge). Returns {win_rate, usefulness: EstimateChoice, ppi (``round_ppi`` or None),
    agreement (``round_judge_agreement`` or None), kappa_threshold}."""
    ppi = agreement = None
    if round_.judge_id is not None:
        ppi = round_ppi(round_)
        agreement = round_judge_agreement(round_)
    return estimates_choose(
        win_rate=win_rate,
        usefulness=usefulness,
        ppi=ppi,
        agreement=agreement,
        kappa_threshold=kappa_threshold,
    )


def estimates_choose(
    *,
    win_rate: Interval,
    usefulness: Interval,
    ppi: dict[str, Any] | None,
    agreement: dict[str, Any] | None,
    kappa_threshold: float,
) -> dict[str, Any]:
    """``round_estimates`` from figures read already (no query): ppi is ``round_ppi``'s dict and
    agreement ``round_judge_agreement``'s (both None for a round without a judge), so the stored
    stopping-panel figures choose again for any ``kappa_threshold``."""
    return {
        "win_rate": _choice(
            win_rate,
            ppi and ppi["win_rate"],
            ppi["win_rate_note"] if ppi else "",
            agreement,
            kappa_threshold,
        ),
        "usefulness": _choice(
            usefulness,
            ppi and ppi["usefulness"],
            ppi["usefulness_note"] if ppi else "",
            agreement,
            kappa_threshold,
        ),
        "ppi": ppi,
        "agreement": agreement,
        "kappa_threshold": kappa_threshold,
    }


def round_panel_estimates(
    round_: EvalRound, *, kappa_threshold: float = DEFAULT_KAPPA_THRESHOLD, n_boot: int = 1000
) -> dict[str, Any]:
    """``round_estimates`` with the human-only intervals the stopping panel computes: the Wilson
    win rate over ``round_outcomes`` (item as the unit) and the usefulness mean bootstrapped over
    items; with no human rating both choices say there is no human estimate."""
    judgements = round_judgements(round_)
    usefulness = stopping.usefulness_summary(
        np.array([j.usefulness for j in judgements], dtype=float),
        np.array([j.assignment.item_id for j in judgements], dtype=int),
        n_boot=n_boot,
    )
    return round_estimates(
        round_,
        win_rate=round_outcomes(round_).win_rate() or win_rates.win_rate([]),
        usefulness=usefulness.mean,
        kappa_threshold=kappa_threshold,
    )


def estimate_record(choice: EstimateChoice) -> dict[str, Any]:
    """An estimate as a decision stores it: {source, estimate, low, high, n, reason}."""
    figures = {
        key: None if isinstance(value, float) and np.isnan(value) else value
        for key, value in choice.interval.as_dict().items()
    }  # JSON has no NaN
    return {"source": choice.source, **figures, "reason": choice.reason}


def round_judge_results(round_: EvalRound) -> dict[str, Any] | None:
    """What a round's page shows of its judge: {judge, ppi (``round_ppi``), agreement
    (``round_judge_agreement``), judge_only (items reviewers are not sent)}; None without a judge."""
    if round_.judge_id is None:
        return None
    return {
        "judge": round_.judge,
        "ppi": round_ppi(round_),
        "agreement": round_judge_agreement(round_),
        "judge_only": round_.items.filter(for_humans=False).count(),
    }
