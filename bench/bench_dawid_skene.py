"""Dawid-Skene on 1,000,000 judgements: ``annotation.agreement.dawid_skene`` vs crowd-kit's ``DawidSkene``.

The project is ``bench_agreement.synthetic_project``'s: 100 annotators, 333,334 comparisons, 3 of
them per comparison (a 45 %, b 45 %, tie 10 %; accuracies 0.55-0.95, ten left-side and ten
longer-answer lovers). Both run the same EM from the same majority-vote start with the settings that
make them the same estimator (tests/annotation/agreement/test_dawid_skene_parity.py): our smoothing
at crowd-kit's 1e-10 floor, the three labels that occur, and the same fixed number of EM iterations
(both stopping rules off), so the times compare equal work. The JSON also says how far the two
results are apart (largest posterior difference, labels that differ) and each tool's time per
iteration.

crowd-kit works on a pandas DataFrame (task, worker, label); building it is not timed. Ours takes
the three integer arrays. Imports happen before the clocks start. Each side is the best of
``--repeat`` / ``--repeat-peer`` runs.

Run: .venv/bin/python bench/bench_dawid_skene.py [--judgements N] [--iterations T] [--repeat R]

``--stored URL`` times the stored consensus (issue 30) instead, on the item browser bench's kept
database (``bench_item_browser.py --keep``: 1,000,000 comparisons, 666,666 judgements): the first
fit (``consensus_refit``: read the judgements, EM, store the fit, rewrite every stored row), then
100 new judgements (on comparisons judged once, by annotators the fit knows) written one statement
each as the labelling screen writes them and, separately, in one statement as an import does; each
is timed with the database's incremental update of the touched rows inside it, then rolled back.
"""

# The stored bench's SQL is built from integer ids this file reads, never from input.
# ruff: noqa: S608

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from side_by_side import VECTOR_FLAGS, best_of, cpu_flags_present, cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_agreement import synthetic_project

from annotation import agreement

CROWD_KIT_FLOOR = 1e-10  # crowd-kit's clip on confusion cells and priors
K = 3


def ours(table: agreement.JudgementTable, iterations: int) -> agreement.DawidSkene:
    return agreement.dawid_skene(
        table.item, table.annotator, table.choice, n_items=table.n_items,
        n_annotators=table.n_annotators, n_categories=K, smoothing=CROWD_KIT_FLOOR,
        max_iter=iterations, tol=-np.inf,
    )  # fmt: skip


def crowd_kit(frame, iterations: int):
    from crowdkit.aggregation import DawidSkene

    with warnings.catch_warnings():  # crowd-kit 1.4's pandas 3 deprecation warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        return DawidSkene(n_iter=iterations, tol=-np.inf).fit(frame)


def _insert_sql(pairs: list[tuple[int, int]]) -> str:
    """One INSERT of judgements (comparison id, annotator id): choice a, as a submit writes it."""
    values = ", ".join(f"({c}, {a}, 'a', 1, '', 'a', 4000, '', now(), now())" for c, a in pairs)
    return (
        "INSERT INTO annotation_judgement (comparison_id, annotator_id, choice, strength, "
        "rationale, shown_left, elapsed_ms, suggested_choice, created_at, updated_at) "
        f"VALUES {values}"
    )


def stored(url: str) -> dict:
    """Time the first fit and the incremental update on the kept item browser bench database."""
    import time

    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from annotation.models import Project, StoredConsensus
    from annotation.services.consensus import consensus_refit

    project = Project.objects.get(slug="bench-items")
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    fit = consensus_refit(project=project, force=True)
    first_fit_s = time.perf_counter() - started
    timings: dict[str, float] = {}
    # 100 comparisons judged once (the bench's single slice, by annotator id % 30), each given a
    # vote by another of the 30 annotators the fit knows.
    first = get_user_model().objects.filter(username="ann0").values_list("pk", flat=True).get()
    targets = list(
        StoredConsensus.objects.filter(project=project, n_votes=1)
        .order_by("comparison_id")
        .values_list("comparison_id", flat=True)[:100]
    )
    pairs = [(c, first + (c + 15) % 30) for c in targets]
    for mode in ("one_statement_each", "one_statement"):
        with transaction.atomic(), connection.cursor() as cursor:
            started = time.perf_counter()
            if mode == "one_statement":
                cursor.execute(_insert_sql(pairs))
            else:
                for pair in pairs:
                    cursor.execute(_insert_sql([pair]))
            timings[mode] = time.perf_counter() - started
            updated = StoredConsensus.objects.filter(comparison_id__in=targets, n_votes=2).count()
            assert updated == 100, updated
            transaction.set_rollback(True)
    return {
        "benchmark": "stored consensus on the item browser bench project (PostgreSQL)",
        "judgements": fit.n_judgements,
        "rows": fit.n_rows,
        "iterations": fit.iterations,
        "first_fit_s": round(first_fit_s, 2),
        "incremental_100_judgements_one_statement_each_s": round(timings["one_statement_each"], 3),
        "incremental_100_judgements_one_statement_s": round(timings["one_statement"], 3),
        "cpu_flags": cpu_flags_present(VECTOR_FLAGS),
        "cpu_count": os.cpu_count(),
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judgements", type=int, default=1_000_000)
    parser.add_argument("--annotators", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=20, help="EM iterations, both tools")
    parser.add_argument("--repeat", type=int, default=3, help="best of R runs (ours)")
    parser.add_argument("--repeat-peer", type=int, default=3, help="best of R runs (crowd-kit)")
    parser.add_argument(
        "--stored",
        default="",
        metavar="URL",
        help="time the stored consensus on this kept item browser bench database",
    )
    args = parser.parse_args()
    if args.stored:
        print(json.dumps(stored(args.stored), indent=2))
        return

    # Imports before any timing (crowd-kit's package and SciPy's sparse module take seconds cold).
    import crowdkit
    import crowdkit.aggregation
    import pandas as pd
    import scipy.sparse  # noqa: F401

    table = synthetic_project(args.judgements, args.annotators, overlap=3)
    frame = pd.DataFrame({"task": table.item, "worker": table.annotator, "label": table.choice})
    load = os.getloadavg()[0]
    ours_s, mine = best_of(lambda: ours(table, args.iterations), args.repeat)
    peer_s, theirs = best_of(lambda: crowd_kit(frame, args.iterations), args.repeat_peer)
    posterior = theirs.probas_.reindex(index=range(table.n_items), columns=range(K)).to_numpy()
    labels = theirs.labels_.reindex(range(table.n_items)).to_numpy()
    result = {
        "benchmark": "Dawid-Skene EM, sparse NumPy/SciPy vs crowd-kit DawidSkene (pandas)",
        "judgements": int(table.item.size),
        "comparisons": table.n_items,
        "annotators": table.n_annotators,
        "iterations": args.iterations,
        "ours_s": round(ours_s, 3),
        "crowd_kit_s": round(peer_s, 3),
        "ratio_crowd_kit_over_ours": round(peer_s / ours_s, 1),
        "ours_ms_per_iteration": round(1000 * ours_s / args.iterations, 1),
        "crowd_kit_ms_per_iteration": round(1000 * peer_s / args.iterations, 1),
        "max_posterior_difference": float(np.abs(mine.consensus.posterior - posterior).max()),
        "labels_differing": int((mine.consensus.label != labels).sum()),
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags_present(VECTOR_FLAGS),
        "cpu_count": os.cpu_count(),
        "load_average_1m": round(load, 2),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "crowd_kit": crowdkit.__version__ if hasattr(crowdkit, "__version__") else "",
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
