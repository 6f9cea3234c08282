"""Export a project's judgements as an immutable, hashed training set (TRL-style JSONL).

Two files per export, in a folder named by their combined SHA-256:

- ``pairs.jsonl``: one row per comparison with a consensus preference:
  ``{"prompt", "chosen", "rejected", "margin", "consensus", "n_judgements", "agreement",
  "comparison_id", "chosen_side", "cluster", "external_id", "model_chosen", "model_rejected",
  "tie"}``. ``prompt`` is the text, or the conversation as messages; ``chosen_side`` says which of
  the comparison's responses (a or b) won, so the raw rows below can be read relative to ``chosen``
  (the annotator-aware reward model joins them by ``comparison_id``); ``cluster`` is the prompt's
  cluster (None before clustering), for cluster-balanced batches and domain conditioning.
- ``judgements.jsonl``: the raw per-annotator rows (choice, strength, shown side, time).

Consensus rule "dawid_skene": the verdict with the highest posterior under a model of each
annotator's reliability (Dawid-Skene EM, annotation.agreement); agreement is that posterior and margin
P(chosen) - P(rejected).

Consensus rule "majority": the most frequent verdict among a, b, tie and both_bad; equal votes for a
and b make a tie. Ties are dropped unless ``keep_ties`` (then chosen = a, rejected = b, margin 0,
``"tie": true``); a "both bad" consensus is always dropped (it says nothing about order).

``agreement`` = share of the comparison's judgements that match the consensus (0-1).
``margin`` = sum over judgements of sign x strength / (n x max strength), in [-1, 1], where sign is +1
for a vote for the chosen response, -1 for the rejected one, 0 for tie or both bad. It grows with
both the strength and the unanimity of the preference, and feeds the reward model's margin term.

An export with the same content as an earlier one is that earlier one (same hash, same row).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from annotation.models import MAX_STRENGTH, Choice, Comparison, DatasetExport, Judgement, Project

CONSENSUS_RULES = ("majority", "dawid_skene")
PAIRS_FILE = "pairs.jsonl"
JUDGEMENTS_FILE = "judgements.jsonl"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class Vote:
    choice: str
    strength: int


@dataclass(frozen=True)
class Consensus:
    """A comparison's consensus: the winning verdict, its agreement (0-1) and margin ([-1, 1])."""

    choice: str
    agreement: float
    margin: float


def majority_consensus(votes: list[Vote], *, max_strength: int = MAX_STRENGTH) -> Consensus:
    """The majority verdict of ``votes`` (non-empty), with its agreement and signed margin."""
    if not votes:
        raise ValueError("a consensus needs at least one vote")
    counts = Counter(vote.choice for vote in votes)
    top = max(counts.values())
    leaders = sorted(choice for choice, n in counts.items() if n == top)
    if len(leaders) == 1:
        winner = leaders[0]
    elif set(leaders) >= {Choice.A, Choice.B} or Choice.TIE in leaders:
        winner = Choice.TIE
    else:  # a or b level with both_bad: the order still has a preferred side
        winner = next(c for c in leaders if c in (Choice.A, Choice.B))
    agreement = counts.get(winner, 0) / len(votes)
    margin = 0.0
    if winner in (Choice.A, Choice.B):
        loser = Choice.B if winner == Choice.A else Choice.A
        signed = sum(
            v.strength if v.choice == winner else -v.strength if v.choice == loser else 0
            for v in votes
        )
        margin = signed / (len(votes) * max_strength)
    return Consensus(choice=winner, agreement=round(agreement, 6), margin=round(margin, 6))


def _sha256_files(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _dump(row: dict) -> str:
    return json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"


def dawid_skene_consensus(posterior: dict[str, float]) -> Consensus:
    """A Dawid-Skene posterior as a consensus: the most probable verdict, its probability as the
    agreement, and P(chosen) - P(rejected) as the margin (0 for a tie or both bad)."""
    choice = max(posterior, key=lambda name: (posterior[name], name == Choice.TIE))
    margin = 0.0
    if choice in (Choice.A, Choice.B):
        other = Choice.B if choice == Choice.A else Choice.A
        margin = posterior[choice] - posterior.get(other, 0.0)
    return Consensus(choice=choice, agreement=round(posterior[choice], 6), margin=round(margin, 6))


def _write_files(
    project: Project, folder: Path, *, keep_ties: bool, min_judgements: int, consensus_rule: str
) -> tuple[int, int, int]:
    """Write pairs and judgements into ``folder``; returns (pairs, judgements, ties dropped)."""
    n_pairs = n_judgements = n_ties = 0
    votes: dict[int, list[Vote]] = {}
    with (folder / JUDGEMENTS_FILE).open("w", encoding="utf-8") as raw:
        judgements = (
            Judgement.objects.filter(comparison__project=project)
            .order_by("comparison_id", "pk")
            .values_list(
                "comparison_id", "annotator__username", "choice", "strength", "shown_left",
                "elapsed_ms", "rationale", "created_at",
            )
        )  # fmt: skip
        for (
            cid,
            who,
            choice,
            strength,
            shown_left,
            elapsed,
            rationale,
            created,
        ) in judgements.iterator(chunk_size=5000):
            votes.setdefault(cid, []).append(Vote(choice, strength))
            raw.write(
                _dump(
                    {
                        "comparison_id": cid,
                        "annotator": who,
                        "choice": choice,
                        "strength": strength,
                        "shown_left": shown_left or None,
                        "elapsed_ms": elapsed,
                        "rationale": rationale,
                        "created_at": created.isoformat(),
                    }
                )
            )
            n_judgements += 1
    posteriors: dict[int, dict] = {}
    if consensus_rule == "dawid_skene" and votes:
        from annotation.agreement_service import project_consensus

        posteriors = project_consensus(project=project, method="dawid_skene")
    comparisons = (
        Comparison.objects.filter(project=project, pk__in=votes.keys())
        .select_related("prompt", "response_a", "response_b")
        .order_by("pk")
    )
    with (folder / PAIRS_FILE).open("w", encoding="utf-8") as pairs:
        for comparison in comparisons.iterator(chunk_size=2000):
            ballot = votes[comparison.pk]
            if len(ballot) < min_judgements:
                continue
            consensus = (
                dawid_skene_consensus(posteriors[comparison.pk]["posterior"])
                if consensus_rule == "dawid_skene"
                else majority_consensus(ballot, max_strength=project.strength_scale)
            )
            if consensus.choice == Choice.BOTH_BAD:
                continue
            if consensus.choice == Choice.TIE and not keep_ties:
                n_ties += 1
                continue
            a, b = comparison.response_a, comparison.response_b
            chosen, rejected = (b, a) if consensus.choice == Choice.B else (a, b)
            prompt = comparison.prompt
            pairs.write(
                _dump(
                    {
                        "prompt": prompt.messages if prompt.messages else prompt.text,
                        "chosen": chosen.text,
                        "rejected": rejected.text,
                        "margin": consensus.margin,
                        "chosen_side": "b" if consensus.choice == Choice.B else "a",
                        "consensus": consensus_rule,
                        "tie": consensus.choice == Choice.TIE,
                        "n_judgements": len(ballot),
                        "agreement": consensus.agreement,
                        "comparison_id": comparison.pk,
                        "cluster": prompt.cluster,
                        "external_id": comparison.external_id,
                        "model_chosen": chosen.model_name,
                        "model_rejected": rejected.model_name,
                    }
                )
            )
            n_pairs += 1
    return n_pairs, n_judgements, n_ties


def dataset_export(
    *,
    project: Project,
    keep_ties: bool = False,
    min_judgements: int = 1,
    consensus: str = "majority",
    created_by: AbstractBaseUser | None = None,
) -> DatasetExport:
    """Freeze the project's current judgements into a hashed export (or return the identical one)."""
    if consensus not in CONSENSUS_RULES:
        raise ValueError(f"unknown consensus rule {consensus!r}; expected one of {CONSENSUS_RULES}")
    if min_judgements < 1:
        raise ValueError("min_judgements must be at least 1")
    root = Path(settings.EXPORT_DIR) / project.slug
    root.mkdir(parents=True, exist_ok=True)
    options = {"keep_ties": keep_ties, "min_judgements": min_judgements, "consensus": consensus}
    with tempfile.TemporaryDirectory(dir=root, prefix=".export-") as scratch:
        staging = Path(scratch)
        n_pairs, n_judgements, n_ties = _write_files(
            project,
            staging,
            keep_ties=keep_ties,
            min_judgements=min_judgements,
            consensus_rule=consensus,
        )
        sha = _sha256_files(staging / PAIRS_FILE, staging / JUDGEMENTS_FILE)
        existing = DatasetExport.objects.filter(sha256=sha).first()
        if existing is not None:
            return existing
        (staging / MANIFEST_FILE).write_text(
            json.dumps(
                {
                    "project": project.slug,
                    "sha256": sha,
                    "options": options,
                    "pairs": n_pairs,
                    "judgements": n_judgements,
                    "ties_dropped": n_ties,
                },
                indent=2,
            )
        )
        folder = root / sha
        if not folder.exists():
            staging.rename(folder)
            Path(scratch).mkdir()  # TemporaryDirectory removes its own path on exit
    try:
        with transaction.atomic():
            return DatasetExport.objects.create(
                project=project,
                created_by=created_by,
                sha256=sha,
                folder=str(folder),
                options=options,
                n_pairs=n_pairs,
                n_judgements=n_judgements,
                n_ties_dropped=n_ties,
            )
    except IntegrityError:  # the same export made at the same moment by someone else
        return DatasetExport.objects.get(sha256=sha)


def export_copy(export: DatasetExport, out: Path) -> tuple[Path, Path]:
    """Copy an export's files to ``out`` (pairs) and ``out`` with ``.judgements.jsonl`` (raw rows)."""
    folder = Path(export.folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw_out = out.with_name(out.name.removesuffix(".jsonl") + ".judgements.jsonl")
    shutil.copyfile(folder / PAIRS_FILE, out)
    shutil.copyfile(folder / JUDGEMENTS_FILE, raw_out)
    return out, raw_out
