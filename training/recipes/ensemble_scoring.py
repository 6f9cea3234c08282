"""Reward-model ensembles as the online recipes read them (PIPELINE.md, "Reward-model ensembles").

A reward-model folder may hold ``ensemble.json`` = ``{"mode": "heads" | "independent", "size": K,
"members": [...]}``:

- ``heads``: one sequence classifier with ``num_labels = K``; logit k is member k's reward;
- ``independent``: subfolders ``member_0`` .. ``member_{K-1}``, each a plain one-output reward model.

No ``ensemble.json``: a plain reward model, K = 1. ``scoring.EnsembleManifest.read`` checks the
file and says which field is wrong; ``EnsembleScorer`` scores K independent members as one [K, S]
block, with the surface of ``RewardScorer`` the online recipes use (a heads ensemble is a
``RewardScorer`` already: ``RewardScorer.score_members``). Outside the online recipes,
``scoring.load_reward_ensemble`` loads the same folders.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from training.recipes.data import FitLog, Messages
from training.recipes.scoring import RewardScorer, member_rewards


class EnsembleScorer:
    """K independent reward models (``member_scorers``, one ``RewardScorer`` each) scored together:
    ``score_members`` gives [K, S] float32. Every member fits its inputs itself (their tokenizers
    may differ); ``fit`` is the log they share."""

    def __init__(self, member_scorers: Sequence[RewardScorer], fit: FitLog) -> None:
        if not member_scorers:
            raise ValueError("an ensemble needs at least one member")
        self.member_scorers = list(member_scorers)
        self.fit = fit

    def share_clusters(self, variants: Sequence[Messages], originals: Sequence[Messages]) -> None:
        for scorer in self.member_scorers:
            scorer.share_clusters(variants, originals)

    def conditioned_clusters(self) -> int:
        return self.member_scorers[0].conditioned_clusters()


def reward_members(scorer: RewardScorer | EnsembleScorer) -> int:
    """K: the outputs of every model behind ``scorer`` (1 for a plain reward model)."""
    return sum(s.n_members for s in member_scorers(scorer))


def member_scorers(scorer: RewardScorer | EnsembleScorer) -> list[RewardScorer]:
    """The scorers behind ``scorer``: itself for one model (plain or K heads), else its members."""
    return scorer.member_scorers if isinstance(scorer, EnsembleScorer) else [scorer]


def score_member_texts(
    scorer: RewardScorer | EnsembleScorer, prompts: Sequence[Messages], texts: Sequence[str]
) -> torch.Tensor:
    """Every member's rewards [K, S] float32 on the CPU for S (prompt, response) pairs scored in
    one batch per member scorer (K = 1 for a plain reward model)."""
    return member_rewards(member_scorers(scorer), prompts, texts).float().cpu()
