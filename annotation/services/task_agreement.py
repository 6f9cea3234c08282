"""Agreement of rating and ranking projects, from their stored answers, through the pure
functions of annotation.agreement.ratings and .ranking. Read-only; the dashboard and
``manage.py agreement --json`` show what ``task_agreement`` returns.

Answers counted: each annotator's first answer per item (repeats are kept apart, as pairwise
keeps swap repeats apart). Numbers are JSON-safe: NaN (not enough data) becomes null.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from annotation.agreement.coefficients import krippendorff_alpha
from annotation.agreement.ranking import (
    kendall_w,
    mean_pairwise_kendall_tau,
    pairwise_agreement_from_rankings,
    ranking_position_bias,
)
from annotation.agreement.ranking_slots import slot_rank_bias, slot_ranks_from_stored
from annotation.agreement.ratings import (
    aspect_alpha,
    rater_leniency,
    scale_use,
    weighted_kappa_pairs,
)
from annotation.models import RATING_SCALE, Project, TaskAnswer, TaskType


def _num(value: float | np.floating | None, digits: int = 6) -> float | None:
    if value is None or not math.isfinite(float(value)):
        return None
    return round(float(value), digits)


def _answers(project: Project) -> list[tuple[int, str, dict, bool | None, list, list]]:
    """(item id, annotator, scores, thumbs, ranks, order) of the project's first answers."""
    return list(
        TaskAnswer.objects.filter(item__project=project, repeat=False)
        .order_by("item_id", "annotator__username")
        .values_list("item_id", "annotator__username", "scores", "thumbs", "ranks", "order")
    )


def _matrix(cells: dict[tuple[str, int], float], raters: list[str], items: list[int]) -> np.ndarray:
    data = np.full((len(raters), len(items)), np.nan)
    r_index = {name: r for r, name in enumerate(raters)}
    i_index = {item: i for i, item in enumerate(items)}
    for (name, item), value in cells.items():
        data[r_index[name], i_index[item]] = value
    return data


def rating_agreement(project: Project) -> dict[str, Any]:
    """Per aspect: Krippendorff's alpha (ordinal, interval), weighted kappa (linear, quadratic)
    per annotator pair, each annotator's leniency (mean offset from the item means, scale points)
    and scale use (shares of each point, extremes, mean, std); thumbs: nominal alpha and the
    share of thumbs up per annotator."""
    answers = _answers(project)
    raters = sorted({a[1] for a in answers})
    items = sorted({a[0] for a in answers})
    aspects = list(project.rating_aspects or [])
    per_aspect: dict[str, np.ndarray] = {}
    for aspect in aspects:
        cells = {(a[1], a[0]): float(a[2][aspect]) for a in answers if aspect in (a[2] or {})}
        per_aspect[aspect] = _matrix(cells, raters, items)
    alphas = aspect_alpha(per_aspect) if raters else {}
    report: dict[str, Any] = {
        "task_type": TaskType.RATING.value,
        "n_answers": len(answers),
        "n_items": len(items),
        "n_annotators": len(raters),
        "scale": list(RATING_SCALE),
        "aspects": {},
    }
    for aspect, data in per_aspect.items():
        alpha = alphas[aspect]
        leniency = rater_leniency(data)
        use = scale_use(data, scale=RATING_SCALE)
        report["aspects"][aspect] = {
            "alpha_ordinal": _num(alpha.ordinal),
            "alpha_interval": _num(alpha.interval),
            "n_items_pairable": alpha.n_items,
            "kappa_pairs": [
                {
                    "annotators": [raters[p.first], raters[p.second]],
                    "n_items": p.n_items,
                    "linear": _num(p.linear),
                    "quadratic": _num(p.quadratic),
                }
                for p in weighted_kappa_pairs(data, scale=RATING_SCALE)
            ],
            "annotators": {
                name: {
                    "leniency": _num(leniency.offset[r]),
                    "n_shared_items": int(leniency.n_items[r]),
                    "mean": _num(use.mean[r]),
                    "std": _num(use.std[r]),
                    "extreme_share": _num(use.extreme_share[r]),
                    "shares": [_num(s) for s in use.shares[r]],
                }
                for r, name in enumerate(raters)
            },
        }
    if project.rating_thumbs:
        cells = {(a[1], a[0]): float(a[3]) for a in answers if a[3] is not None}
        data = _matrix(cells, raters, items)
        pairable = (~np.isnan(data)).sum(axis=0) >= 2
        up = defaultdict(list)
        for (name, _), value in cells.items():
            up[name].append(value)
        report["thumbs"] = {
            "alpha_nominal": _num(krippendorff_alpha(data[:, pairable], level="nominal"))
            if pairable.sum() and len(raters) >= 2
            else None,
            "up_share": {name: _num(float(np.mean(v))) for name, v in sorted(up.items())},
        }
    return report


def ranking_agreement(project: Project) -> dict[str, Any]:
    """Kendall's W and the mean pairwise Kendall tau-b (means over items ranked by at least two
    annotators), the rankings decomposed into pairs (percent agreement and Fleiss' kappa, as for
    pairwise projects) and position bias from the stored display orders: the tau between screen
    slot and rank, and the mean rank by screen slot with Friedman's test (``slots``)."""
    answers = _answers(project)
    by_item: dict[int, list[list[int]]] = defaultdict(list)
    positions, ranks, by_slot = [], [], []
    for item_id, _, _, _, item_ranks, order in answers:
        by_item[item_id].append(list(item_ranks))
        if order:
            shown_at = [0] * len(order)
            for slot, position in enumerate(order):
                shown_at[position] = slot
            positions.append(shown_at)
            ranks.append(list(item_ranks))
            by_slot.append(slot_ranks_from_stored(order, item_ranks))
    shared = [np.asarray(r, dtype=float) for r in by_item.values() if len(r) >= 2]
    ws = [kendall_w(r) for r in shared]
    taus = [mean_pairwise_kendall_tau(r) for r in shared]
    report: dict[str, Any] = {
        "task_type": TaskType.RANKING.value,
        "n_answers": len(answers),
        "n_items": len(by_item),
        "n_annotators": len({a[1] for a in answers}),
        "n_items_shared": len(shared),
        "kendall_w": _num(np.nanmean(ws)) if ws and not np.isnan(ws).all() else None,
        "mean_kendall_tau": _num(np.nanmean(taus)) if taus and not np.isnan(taus).all() else None,
        "pairwise": None,
        "position_bias": None,
    }
    if shared:
        pairwise = pairwise_agreement_from_rankings(shared)
        report["pairwise"] = {
            "n_pairs": pairwise.n_pairs,
            "percent_agreement": _num(pairwise.percent_agreement),
            "percent_agreement_no_ties": _num(pairwise.percent_agreement_no_ties),
            "fleiss_kappa": _num(pairwise.fleiss_kappa),
        }
    if ranks:
        bias = ranking_position_bias(positions, ranks)
        report["position_bias"] = {
            "n_rankings": bias.n_rankings,
            "tau": _num(bias.tau),
            "first_best_rate": _num(bias.first_best_rate),
            "first_best_expected": _num(bias.first_best_expected),
            "slots": _slot_bias(by_slot),
        }
    return report


def _slot_bias(slot_ranks: list[list[float]]) -> dict[str, Any]:
    """The mean rank by screen slot (1 = best) per ranking size and Friedman's test of "the slot
    does not matter" (``annotation.agreement.ranking_slots``), JSON-safe."""
    bias = slot_rank_bias(slot_ranks)
    return {
        "sizes": [
            {
                "k": size.k,
                "n_rankings": size.n_rankings,
                "mean_rank": [_num(value, 4) for value in size.mean_rank],
                "expected": size.expected,
                "statistic": _num(size.statistic),
                "df": size.df,
            }
            for size in bias.by_size
        ],
        "test": "friedman",
        "statistic": _num(bias.statistic),
        "df": bias.df,
        "p_value": _num(bias.p_value),
    }


def gold_agreement(project: Project) -> dict[str, dict[str, Any]]:
    """Per annotator, their answers on gold items against the known answers: ``n``; for ratings
    ``mean_abs_error`` (scale points, over every gold aspect score) and ``thumbs_match`` (share);
    for rankings ``mean_tau`` (Kendall tau-b with the gold ranking)."""
    rows = (
        TaskAnswer.objects.filter(item__project=project, gold=True)
        .exclude(item__gold={})
        .order_by("annotator__username", "item_id")
        .values_list("annotator__username", "item__gold", "scores", "thumbs", "ranks")
    )
    errors: dict[str, list[float]] = defaultdict(list)
    matches: dict[str, list[float]] = defaultdict(list)
    taus: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    for name, gold, scores, thumbs, ranks in rows:
        counts[name] += 1
        for aspect, value in (gold.get("scores") or {}).items():
            if aspect in (scores or {}):
                errors[name].append(abs(float(scores[aspect]) - float(value)))
        if gold.get("thumbs") is not None and thumbs is not None:
            matches[name].append(float(thumbs == gold["thumbs"]))
        if gold.get("ranks") and ranks:
            taus[name].append(mean_pairwise_kendall_tau(np.asarray([ranks, gold["ranks"]], float)))

    def mean(values: list[float]) -> float | None:
        return _num(np.nanmean(values)) if values and not np.isnan(values).all() else None

    return {
        name: {
            "n": n,
            "mean_abs_error": mean(errors[name]),
            "thumbs_match": mean(matches[name]),
            "mean_tau": mean(taus[name]),
        }
        for name, n in counts.items()
    }


def task_agreement(*, project: Project) -> dict[str, Any]:
    """The agreement report of a rating or ranking project (see the functions above), with the
    annotators' answers on gold items (``gold``)."""
    if project.task_type == TaskType.RATING:
        report = rating_agreement(project)
    elif project.task_type == TaskType.RANKING:
        report = ranking_agreement(project)
    else:
        raise ValueError(f"{project.slug} is a pairwise project: use services.agreement")
    report["gold"] = gold_agreement(project)
    return report
