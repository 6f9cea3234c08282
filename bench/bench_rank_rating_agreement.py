"""Agreement for ranking and rating projects (issue #32) at dashboard size: how long each pure function
of ``annotation.agreement.ranking`` and ``annotation.agreement.ratings`` takes.

Synthetic ranking project: ``--prompts`` prompts (default 10,000), 3 raters each ranking K = 4
responses (rankings noisy around a true order, 10% of them with a tie), each ranking with its own
random display order. Synthetic rating project: 20 raters, ``--items`` items (default 20,000), 3
ratings per item on a 1-5 scale, 5 aspects.

Prints one JSON object: the best of ``--repeat`` wall times in seconds per function (float64 NumPy,
one process), the machine's load average and CPU flags.
Run: .venv/bin/python bench/bench_rank_rating_agreement.py [--prompts N] [--items N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from side_by_side import best_of

from annotation.agreement.ranking import (
    consensus_ranking,
    kendall_w,
    mean_pairwise_kendall_tau,
    pairwise_agreement_from_rankings,
    ranking_position_bias,
)
from annotation.agreement.ratings import (
    aspect_alpha,
    rater_leniency,
    scale_use,
    weighted_kappa_pairs,
)


def ranking_project(n_prompts: int, seed: int = 0) -> tuple[list[np.ndarray], list, list]:
    """Per prompt a ranks array [3, 4]; per ranking its display positions and ranks [4]."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=(n_prompts, 3, 4)) + np.arange(4)  # true order 0 < 1 < 2 < 3
    ranks = np.argsort(np.argsort(noise, axis=2), axis=2) + 1.0
    tied = rng.random((n_prompts, 3)) < 0.1
    ranks[tied, 3] = ranks[tied, 2] = np.minimum(ranks[tied, 2], ranks[tied, 3])
    shown = np.argsort(rng.random((n_prompts * 3, 4)), axis=1)
    return list(ranks), list(shown), list(ranks.reshape(-1, 4))


def rating_project(n_items: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Aspect name -> ratings [20 raters, n_items], 3 raters per item, NaN elsewhere."""
    rng = np.random.default_rng(seed)
    raters = np.argsort(rng.random((n_items, 20)), axis=1)[:, :3]
    aspects = {}
    for name in ("helpfulness", "correctness", "coherence", "complexity", "verbosity"):
        truth = rng.integers(1, 6, n_items)
        data = np.full((20, n_items), np.nan)
        noisy = np.clip(truth[:, None] + rng.integers(-1, 2, (n_items, 3)), 1, 5)
        data[raters, np.arange(n_items)[:, None]] = noisy
        aspects[name] = data
    return aspects


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    per_prompt, shown, rankings = ranking_project(args.prompts)
    aspects = rating_project(args.items)
    helpfulness = aspects["helpfulness"]
    timings = {
        "pairwise_agreement_from_rankings": lambda: pairwise_agreement_from_rankings(per_prompt),
        "kendall_w_every_prompt": lambda: [kendall_w(r) for r in per_prompt],
        "mean_pairwise_kendall_tau_every_prompt": lambda: [
            mean_pairwise_kendall_tau(r) for r in per_prompt
        ],
        "consensus_ranking_every_prompt": lambda: [consensus_ranking(r) for r in per_prompt],
        "ranking_position_bias": lambda: ranking_position_bias(shown, rankings),
        "weighted_kappa_pairs_one_aspect": lambda: weighted_kappa_pairs(helpfulness, scale=(1, 5)),
        "aspect_alpha_five_aspects": lambda: aspect_alpha(aspects),
        "rater_leniency_one_aspect": lambda: rater_leniency(helpfulness),
        "scale_use_one_aspect": lambda: scale_use(helpfulness, scale=(1, 5)),
    }
    seconds = {name: round(best_of(run, args.repeat)[0], 4) for name, run in timings.items()}
    flags = (
        sorted(
            set(Path("/proc/cpuinfo").read_text().split())
            & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
        )
        if Path("/proc/cpuinfo").exists()
        else []
    )
    print(
        json.dumps(
            {
                "prompts": args.prompts,
                "raters_per_prompt": 3,
                "responses_per_prompt": 4,
                "rating_items": args.items,
                "seconds": seconds,
                "load_average": os.getloadavg(),
                "cpu_flags": flags,
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
