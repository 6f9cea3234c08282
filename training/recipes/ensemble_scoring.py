"""Reward-model ensembles as the online recipes read them (PIPELINE.md, "Reward-model ensembles").

A reward-model folder may hold ``ensemble.json`` = ``{"mode": "heads" | "independent", "size": K,
"members": [...]}``:

- ``heads``: one sequence classifier with ``num_labels = K``; logit k is member k's reward;
- ``independent``: subfolders ``member_0`` .. ``member_{K-1}``, each a plain one-output reward model.

No ``ensemble.json``: a plain reward model, K = 1. ``scoring.EnsembleManifest.read`` checks the
file and says which field is wrong. The online recipes hold a heads ensemble (or a plain model) as
one ``RewardScorer`` (``RewardScorer.score_members`` gives its K outputs) and K independent members
as a ``scoring.RewardEnsemble`` (the class ``scoring.load_reward_ensemble`` returns elsewhere);
the functions here score either as one [K, S] block.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from training.recipes.data import Messages
from training.recipes.scoring import RewardEnsemble, RewardScorer, member_rewards


def reward_members(scorer: RewardScorer | RewardEnsemble) -> int:
    """K: the outputs of every model behind ``scorer`` (1 for a plain reward model)."""
    return sum(s.n_members for s in member_scorers(scorer))


def member_scorers(scorer: RewardScorer | RewardEnsemble) -> list[RewardScorer]:
    """The scorers behind ``scorer``: itself for one model (plain or K heads), else its members."""
    return scorer.scorers if isinstance(scorer, RewardEnsemble) else [scorer]


def score_member_texts(
    scorer: RewardScorer | RewardEnsemble, prompts: Sequence[Messages], texts: Sequence[str]
) -> torch.Tensor:
    """Every member's rewards [K, S] float32 on the CPU for S (prompt, response) pairs scored in
    one batch per member scorer (K = 1 for a plain reward model)."""
    return member_rewards(member_scorers(scorer), prompts, texts).float().cpu()
