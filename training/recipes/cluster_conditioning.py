"""Domain conditioning of a reward model (PIPELINE.md's third layer): a learned vector per prompt
cluster added to every input token's embedding, saved beside the model as ``CONDITIONING_FILE``.
``scoring.RewardScorer`` scores through it; the reward-model recipe trains it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

CONDITIONING_FILE = "cluster_conditioning.json"


class ClusterConditioning(nn.Module):
    """Domain conditioning (PIPELINE.md's third layer): a learned vector per prompt cluster, added to
    the input embedding of every token of a sequence whose prompt is in that cluster.

    Added to the input, not to the pooled output: an offset at the output would be the same for a
    pair's chosen and rejected responses (same prompt, same cluster) and cancel in the Bradley-Terry
    difference. Row 0 is "no cluster" and stays zero; the others start at zero, so training starts
    from the base model. Shapes: ``weight`` [C + 1, H].
    """

    def __init__(self, clusters: Sequence[str], hidden_size: int) -> None:
        super().__init__()
        self.clusters = list(clusters)
        self.index = {name: i + 1 for i, name in enumerate(self.clusters)}
        self.weight = nn.Parameter(torch.zeros(len(self.clusters) + 1, hidden_size))
        self._tokens: torch.Tensor | None = None

    def ids(self, clusters: Sequence[str | None]) -> list[int]:
        return [self.index.get(c, 0) if c is not None else 0 for c in clusters]

    def attach(self, model: Any) -> None:
        """Add the current token clusters to ``model``'s input embeddings from now on."""
        model.get_input_embeddings().register_forward_hook(self._add)

    def _add(self, module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        if self._tokens is None:
            return output
        known = (self._tokens > 0).unsqueeze(-1)  # row 0 ("no cluster") adds exactly nothing
        added = torch.where(known, self.weight[self._tokens], 0.0)
        return output + added.to(output.dtype)

    def condition(self, tokens: torch.Tensor | None) -> None:
        """Cluster id per input token (the shape of the next forward's input ids), or None."""
        self._tokens = tokens

    def report(self) -> dict[str, float]:
        """Norm of each cluster's learned vector (how far the reward adapted to that domain)."""
        norms = self.weight.detach()[1:].norm(dim=-1).tolist()
        return {name: round(norm, 4) for name, norm in zip(self.clusters, norms, strict=True)}

    def payload(self) -> dict[str, Any]:
        return {"clusters": self.clusters, "weight": self.weight.detach()[1:].tolist()}

    @classmethod
    def load(cls, folder: str | Path, hidden_size: int) -> ClusterConditioning | None:
        """The conditioning saved beside a trained reward model (``CONDITIONING_FILE``), or None
        when the model was trained without it."""
        file = Path(folder) / CONDITIONING_FILE
        if not file.is_file():
            return None
        payload = json.loads(file.read_text())
        module = cls(payload["clusters"], hidden_size)
        weight = torch.tensor(payload["weight"], dtype=torch.float32)
        if weight.shape != (len(module.clusters), hidden_size):
            raise ValueError(
                f"{file}: weight is {list(weight.shape)}, expected "
                f"[{len(module.clusters)}, {hidden_size}] (clusters x the model's hidden size)"
            )
        with torch.no_grad():
            module.weight[1:] = weight
        return module
