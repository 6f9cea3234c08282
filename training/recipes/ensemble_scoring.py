"""Reward-model ensembles as the online recipes read them (PIPELINE.md, "Reward-model ensembles").

A reward-model folder may hold ``ensemble.json`` = ``{"mode": "heads" | "independent", "size": K,
"members": [...]}``:

- ``heads``: one sequence classifier with ``num_labels = K``; logit k is member k's reward;
- ``independent``: subfolders ``member_0`` .. ``member_{K-1}``, each a plain one-output reward model.

No ``ensemble.json``: a plain reward model, K = 1. ``read_ensemble_manifest`` checks the file and
says which field is wrong; ``EnsembleScorer`` scores K independent members as one [K, S] block, with
the surface of ``RewardScorer`` the recipes use (a heads ensemble is a ``RewardScorer`` already:
``RewardScorer.score_members``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from training.recipes.data import FitLog, Messages
from training.recipes.scoring import RewardScorer

ENSEMBLE_FILE = "ensemble.json"
ENSEMBLE_MODES = ("heads", "independent")


@dataclass(frozen=True)
class EnsembleManifest:
    """What ``ensemble.json`` says: the mode, the number of members K, and the members' names
    (``member_k`` subfolders for ``independent``; free labels for ``heads``)."""

    mode: str
    size: int
    members: tuple[str, ...]

    def member_folders(self, folder: str | Path) -> list[Path]:
        """The K member folders of an ``independent`` ensemble saved in ``folder``."""
        return [Path(folder) / f"member_{k}" for k in range(self.size)]


def read_ensemble_manifest(folder: str | Path) -> EnsembleManifest | None:
    """The ensemble described beside the reward model in ``folder``, or None for a plain reward
    model. ValueError naming the file and the field on a malformed manifest or a missing member."""
    file = Path(folder) / ENSEMBLE_FILE
    if not file.is_file():
        return None
    try:
        payload = json.loads(file.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{file}: not JSON ({error})") from None
    if not isinstance(payload, dict):
        raise ValueError(f"{file}: expected an object with mode, size and members")
    mode, size = payload.get("mode"), payload.get("size")
    if mode not in ENSEMBLE_MODES:
        raise ValueError(f"{file}: mode must be one of {ENSEMBLE_MODES}, got {mode!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(f"{file}: size must be a whole number >= 1, got {size!r}")
    members = payload.get("members", [f"member_{k}" for k in range(size)])
    if not isinstance(members, list) or len(members) != size:
        raise ValueError(f"{file}: members must list {size} members (size), got {members!r}")
    manifest = EnsembleManifest(mode, size, tuple(str(m) for m in members))
    if mode == "independent":
        missing = [p.name for p in manifest.member_folders(folder) if not p.is_dir()]
        if missing:
            raise ValueError(f"{file}: independent members need subfolders, missing {missing}")
    return manifest


class EnsembleScorer:
    """K independent reward models (``member_scorers``, one ``RewardScorer`` each) scored together:
    ``score_members`` gives [K, S] float32. Every member fits its inputs itself (their tokenizers
    may differ); ``fit`` is the log they share."""

    def __init__(self, member_scorers: Sequence[RewardScorer], fit: FitLog) -> None:
        if not member_scorers:
            raise ValueError("an ensemble needs at least one member")
        self.member_scorers = list(member_scorers)
        self.fit = fit

    @property
    def heads(self) -> int:
        """Members in all (K)."""
        return sum(s.heads for s in self.member_scorers)

    def share_clusters(self, variants: Sequence[Messages], originals: Sequence[Messages]) -> None:
        for scorer in self.member_scorers:
            scorer.share_clusters(variants, originals)

    def conditioned_clusters(self) -> int:
        return self.member_scorers[0].conditioned_clusters()


def member_scorers(scorer: RewardScorer | EnsembleScorer) -> list[RewardScorer]:
    """The scorers behind ``scorer``: itself for one model (plain or K heads), else its members."""
    return scorer.member_scorers if isinstance(scorer, EnsembleScorer) else [scorer]


def score_member_texts(
    scorer: RewardScorer | EnsembleScorer, prompts: Sequence[Messages], texts: Sequence[str]
) -> torch.Tensor:
    """Every member's rewards [K, S] float32 on the CPU for S (prompt, response) pairs scored in
    one batch per member scorer (K = 1 for a plain reward model)."""
    rows = []
    for member in member_scorers(scorer):
        inputs = [member.encode(p, t) for p, t in zip(prompts, texts, strict=True)]
        rows.append(member.score_members(inputs, member.clusters_for(prompts)).float().cpu())
    return torch.cat(rows, dim=0)
