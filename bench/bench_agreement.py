"""Agreement report on 1,000,000 judgements: Concord's vectorised report vs the usual peer pipeline.

Synthetic project: 100 annotators, 333,334 comparisons, 3 distinct annotators per comparison (the last
comparison gets 1 so the total is exactly 1,000,000). Each comparison has a true answer (a 45%, b 45%,
tie 10%); annotators answer correctly with their own accuracy (0.55-0.95) and otherwise pick at random;
ten of them favour the left side and ten the longer response, so the bias statistics have work to do.

Ours (one call, ``annotation.agreement.agreement_report``): percent agreement (with and without ties),
Fleiss' kappa, Krippendorff's alpha and Gwet's AC1, each with a 1,000-replicate bootstrap interval,
Cohen's kappa for every annotator pair, and every annotator's bias statistics.

Peers (the pipeline people write with the usual tools, coefficients only, no intervals, no bias):
statsmodels ``aggregate_raters`` + ``fleiss_kappa``; the ``krippendorff`` package's ``alpha`` on the
raters x items matrix (NaN missing); scikit-learn's ``cohen_kappa_score`` for every annotator pair that
shares at least one comparison. Gwet's AC1 has no common Python peer and is left out of their side.

Prints one JSON object: both times, the ratio, and the coefficients of both sides (they must agree).
Run: .venv/bin/python bench/bench_agreement.py [--judgements N] [--repeat R] [--skip-peers]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from side_by_side import best_of

from annotation import agreement


def synthetic_project(
    n_judgements: int = 1_000_000, n_annotators: int = 100, overlap: int = 3, seed: int = 0
) -> agreement.JudgementTable:
    """A JudgementTable with known habits (see the module docstring). Vectorised; ~0.3 s for 1M."""
    rng = np.random.default_rng(seed)
    n_items = -(-n_judgements // overlap)
    # Distinct annotators per item: the first `overlap` of a random permutation, via argsort of noise.
    chosen = np.argsort(rng.random((n_items, n_annotators)), axis=1)[:, :overlap]
    item = np.repeat(np.arange(n_items), overlap)[:n_judgements]
    annotator = chosen.ravel()[:n_judgements]
    truth = rng.choice(3, size=n_items, p=[0.45, 0.45, 0.10])
    length_a = rng.integers(200, 2000, n_items)
    length_b = rng.integers(200, 2000, n_items)
    accuracy = rng.uniform(0.55, 0.95, n_annotators)
    shown_left = rng.integers(0, 2, n_judgements)
    correct = rng.random(n_judgements) < accuracy[annotator]
    choice = np.where(correct, truth[item], rng.choice(3, n_judgements, p=[0.4, 0.4, 0.2]))
    left_lovers = np.isin(annotator, np.arange(10))
    length_lovers = np.isin(annotator, np.arange(10, 20))
    nudged = rng.random(n_judgements) < 0.3
    choice = np.where(left_lovers & nudged, shown_left, choice)
    longer = np.where(length_a > length_b, agreement.A, agreement.B)[item]
    choice = np.where(length_lovers & nudged, longer, choice)
    elapsed = rng.lognormal(np.log(20_000), 0.5, n_judgements)
    elapsed[annotator >= 95] /= 8  # five fast clickers
    gold = np.where(rng.random(n_items) < 0.02, truth, agreement.MISSING)
    return agreement.JudgementTable(
        item=item,
        annotator=annotator,
        choice=choice.astype(np.int64),
        n_items=n_items,
        n_annotators=n_annotators,
        shown_left=shown_left,
        elapsed_ms=elapsed,
        gold=gold,
        length_a=length_a,
        length_b=length_b,
    )


def ours(table: agreement.JudgementTable, overlap: int) -> dict[str, float]:
    report = agreement.agreement_report(table, overlap=overlap, n_categories=3, n_boot=1000)
    result = {name: value.estimate for name, value in report.coefficients.items()}
    result["pairs"] = int(report.pairs.kappa.size)
    result["mean_pair_kappa"] = float(np.nanmean(report.pairs.kappa))
    result["flagged"] = sum(1 for flags in report.annotators.flags if flags)
    return result


def _consensus(table: agreement.JudgementTable) -> dict[str, float]:
    """Dawid-Skene consensus (not part of the report: the export asks for it)."""
    result = agreement.dawid_skene(
        table.item, table.annotator, table.choice, n_items=table.n_items,
        n_annotators=table.n_annotators, n_categories=3,
    )  # fmt: skip
    return {
        "iterations": result.iterations,
        "mean_margin": float(np.nanmean(result.consensus.margin)),
    }


def peers(table: agreement.JudgementTable, overlap: int) -> dict[str, float]:
    import krippendorff
    from sklearn.metrics import cohen_kappa_score
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    # Fleiss: items x raters (the `overlap` choices of each full item), then statsmodels' counts.
    sizes = np.bincount(table.item, minlength=table.n_items)
    full = sizes[table.item] == overlap
    by_item = table.choice[full].reshape(-1, overlap)
    counts, _ = aggregate_raters(by_item, n_cat=agreement.N_CHOICES)
    fleiss = fleiss_kappa(counts, method="fleiss")
    # Krippendorff: the raters x items reliability matrix with NaN for missing.
    reliability = np.full((table.n_annotators, table.n_items), np.nan)
    reliability[table.annotator, table.item] = table.choice
    alpha = krippendorff.alpha(reliability_data=reliability, level_of_measurement="nominal")
    # Cohen for every pair: the two raters' rows where both rated.
    kappas = []
    for first in range(table.n_annotators):
        for second in range(first + 1, table.n_annotators):
            both = ~np.isnan(reliability[first]) & ~np.isnan(reliability[second])
            if both.any():
                kappas.append(
                    cohen_kappa_score(reliability[first, both], reliability[second, both])
                )
    return {
        "fleiss_kappa": float(fleiss),
        "krippendorff_alpha": float(alpha),
        "pairs": len(kappas),
        "mean_pair_kappa": float(np.nanmean(kappas)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judgements", type=int, default=1_000_000)
    parser.add_argument("--annotators", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="best of R runs (ours)")
    parser.add_argument("--skip-peers", action="store_true")
    args = parser.parse_args()
    overlap = 3
    table = synthetic_project(args.judgements, args.annotators, overlap)
    ours_s, ours_result = best_of(lambda: ours(table, overlap), args.repeat)
    consensus_s, consensus = best_of(lambda: _consensus(table), 1)
    output = {
        "benchmark": "agreement report, vectorised NumPy vs statsmodels + krippendorff + sklearn",
        "judgements": int(table.item.size),
        "comparisons": table.n_items,
        "annotators": table.n_annotators,
        "ours_s": round(ours_s, 3),
        "ours_includes": "5 coefficients x 1000 bootstrap replicates, all pairs' Cohen, bias stats",
        "ours": ours_result,
        "goal_s": 1.0,
        "dawid_skene_s": round(consensus_s, 3),
        "dawid_skene": consensus,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    if not args.skip_peers:
        peers_s, peers_result = best_of(lambda: peers(table, overlap), 1)
        output.update(
            peers_s=round(peers_s, 3),
            peers_include="Fleiss, nominal alpha, all pairs' Cohen; no intervals, no bias stats",
            peers=peers_result,
            ratio_peers_over_ours=round(peers_s / ours_s, 1),
        )
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
