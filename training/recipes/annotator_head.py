"""PIPELINE.md's annotator-aware reward model, the part beside the reward: a per-annotator
reliability scale and side bias (``AnnotatorBiasHead``) over every annotator's own vote
(``VoteTable``), and the votes' loss (``annotator_loss``). Trained with the reward model by
``reward_model`` when ``annotator_aware``; dropped at inference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from training.recipes.data import AnnotatorVote

CONSENSUS_VOTER = "(consensus)"


class AnnotatorBiasHead(nn.Module):
    """Per-annotator calibration of the base reward (PIPELINE.md's annotator-aware reward model).

    P(annotator k prefers the chosen response) = sigmoid(s_k (r_chosen - r_rejected) + b_k side),
    side = +1 when the chosen response was shown on the left, -1 on the right, 0 unknown. s_k = exp of
    a learned log-scale (reliability: a noisy annotator's votes move the base reward less) and b_k is
    the annotator's pull towards the left side. An additive per-annotator offset would cancel in the
    difference, so these two are the biases a pairwise judgement can reveal. Trained jointly with the
    reward model and dropped at inference: the saved model is the base reward model alone.
    """

    def __init__(self, annotators: Sequence[str]) -> None:
        super().__init__()
        self.annotators = list(annotators)
        self.log_scale = nn.Parameter(torch.zeros(len(self.annotators)))
        self.side_bias = nn.Parameter(torch.zeros(len(self.annotators)))

    def forward(
        self, reward_gap: torch.Tensor, annotator: torch.Tensor, side: torch.Tensor
    ) -> torch.Tensor:
        """reward_gap, side: [V] float, annotator: [V] long -> logits [V] of preferring chosen."""
        return self.log_scale[annotator].exp() * reward_gap + self.side_bias[annotator] * side

    def report(self) -> dict[str, dict[str, float]]:
        scale, bias = self.log_scale.detach().exp().tolist(), self.side_bias.detach().tolist()
        return {
            name: {"scale": round(scale[i], 4), "left_bias": round(bias[i], 4)}
            for i, name in enumerate(self.annotators)
        }


@dataclass
class VoteTable:
    """Votes grouped by pair: for each pair, (annotator ids, side, label) tensors."""

    by_pair: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    annotators: list[str]

    @classmethod
    def build(cls, votes: Sequence[AnnotatorVote], n_pairs: int) -> VoteTable:
        annotators = sorted({v.annotator for v in votes} | {CONSENSUS_VOTER})
        ids = {name: i for i, name in enumerate(annotators)}
        rows: dict[int, list[tuple[int, float, float]]] = {}
        for vote in votes:
            side = (
                0.0 if vote.chosen_shown_left is None else (1.0 if vote.chosen_shown_left else -1.0)
            )
            rows.setdefault(vote.pair, []).append(
                (ids[vote.annotator], side, float(vote.prefers_chosen))
            )
        for pair in range(n_pairs):  # a pair with no recorded votes counts as one consensus vote
            rows.setdefault(pair, [(ids[CONSENSUS_VOTER], 0.0, 1.0)])
        table = {
            pair: (
                torch.tensor([r[0] for r in entries]),
                torch.tensor([r[1] for r in entries]),
                torch.tensor([r[2] for r in entries]),
            )
            for pair, entries in rows.items()
        }
        return cls(table, annotators)

    def count(self, pairs: Sequence[int]) -> int:
        return sum(len(self.by_pair[p][0]) for p in pairs)


def annotator_loss(
    head: AnnotatorBiasHead,
    votes: VoteTable,
    group: Sequence[int],
    chosen: torch.Tensor,
    rejected: torch.Tensor,
) -> tuple[torch.Tensor, int]:
    """Summed binary cross-entropy of every vote on ``group``'s pairs, and the number of votes."""
    device = chosen.device
    gap = chosen - rejected
    position = torch.cat(
        [torch.full((len(votes.by_pair[p][0]),), i) for i, p in enumerate(group)]
    ).to(device)
    annotator, side, label = (
        torch.cat([votes.by_pair[p][k] for p in group]).to(device) for k in range(3)
    )
    logits = head(gap.index_select(0, position), annotator, side)
    loss = F.binary_cross_entropy_with_logits(logits, label, reduction="sum")
    return loss, int(label.numel())
