"""Export a project's judgements as an immutable, hashed training set (TRL-style JSONL).

Two files per export, in a folder named by their combined SHA-256:

- ``pairs.jsonl``: one row per comparison with a consensus preference:
  ``{"prompt", "chosen", "rejected", "margin", "consensus", "n_judgements", "agreement",
  "comparison_id", "chosen_side", "cluster", "external_id", "model_chosen", "model_rejected",
  "tie"}``, plus ``"answer"`` when the prompt has a reference answer. ``prompt`` is the text, or
  the conversation as messages; ``chosen_side`` says which of the comparison's responses (a or b)
  won, so the raw rows below can be read relative to ``chosen`` (the annotator-aware reward model
  joins them by ``comparison_id``); ``cluster`` is the prompt's cluster (None before clustering),
  for cluster-balanced batches and domain conditioning; ``answer`` is the prompt's reference answer
  as text (``Prompt.metadata["answer"]``, set on import), which GRPO's answer-checking rewards
  read. A row whose prompt has none has no ``answer`` key, so an export without answers is byte
  for byte what it was before answers existed (same hash); the Parquet export
  (annotation.services.hf_export) always has the column, null there.
- ``judgements.jsonl``: the raw per-annotator rows (choice, strength, shown side, time).

Consensus rule "dawid_skene": the verdict with the highest posterior under a model of each
annotator's reliability (Dawid-Skene EM, annotation.agreement); agreement is that posterior and margin
P(chosen) - P(rejected).

Consensus rule "adjudicated": an adjudicator's current verdict where there is one (row
``"consensus": "adjudicated"``; agreement and margin computed from the votes as for the majority, with
the verdict as the winner), the ``fallback`` rule (majority or dawid_skene) elsewhere. The manifest
counts the pairs that came from adjudication, and the judgements per guidelines version.

Consensus rule "majority": the most frequent verdict among a, b, tie and both_bad; equal votes for a
and b make a tie. Ties are dropped unless ``keep_ties`` (then chosen = a, rejected = b, margin 0,
``"tie": true``); a "both bad" consensus is always dropped (it says nothing about order).

``agreement`` = share of the comparison's judgements that match the consensus (0-1).
``margin`` = sum over judgements of sign x strength / (n x max strength), in [-1, 1], where sign is +1
for a vote for the chosen response, -1 for the rejected one, 0 for tie or both bad. It grows with
both the strength and the unanimity of the preference, and feeds the reward model's margin term.

An export with the same content as an earlier one is that earlier one (same hash, same row).
The Hugging Face dataset layout of an export is annotation.services.hf_export. A rating or ranking
project's export (annotation.services.item_exports) shares the folder layout, the manifest, the
hash rule and the row; the file a run reads is ``export_data_path``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from annotation.agreement import CHOICES, side_margin, top_choice
from annotation.models import (
    MAX_STRENGTH,
    Choice,
    DatasetExport,
    Judgement,
    Project,
    Prompt,
    TaskType,
)
from annotation.selectors.adjudication import adjudicated_choices, judgements_per_version
from annotation.services.export_reads import PairTexts, chunks_read_ahead
from common.roles import human_judgements

CONSENSUS_RULES = ("majority", "dawid_skene", "adjudicated")
FALLBACK_RULES = ("majority", "dawid_skene")
PAIRS_FILE = "pairs.jsonl"
JUDGEMENTS_FILE = "judgements.jsonl"
ITEMS_FILE = "items.jsonl"  # an item export's every item with its answers (task_export "items")
MANIFEST_FILE = "manifest.json"


class Vote(NamedTuple):
    """One person's verdict on a comparison (a tuple: an export builds millions)."""

    choice: str
    strength: int


@dataclass(frozen=True)
class PairConsensus:
    """A comparison's consensus: the winning verdict, its agreement (0-1) and margin ([-1, 1])."""

    choice: str
    agreement: float
    margin: float


@functools.lru_cache(maxsize=4096)
def _winner_of(scores: tuple[float, ...]) -> str:
    """``_winner`` of one score per verdict in CHOICES order. Cached: a majority's counts repeat
    (a handful of vote patterns over a million comparisons), and a one-row numpy call per
    comparison was a tenth of an export's time."""
    return CHOICES[int(top_choice(np.array([scores]), split="tie")[0])]


def _winner(scores: dict[str, float]) -> str:
    """The export's winner of one comparison: ``top_choice`` with a split between a and b (or one
    involving tie) made a tie."""
    return _winner_of(tuple(scores.get(name, 0.0) for name in CHOICES))


def majority_consensus(
    votes: list[Vote], *, max_strength: int = MAX_STRENGTH, winner: str | None = None
) -> PairConsensus:
    """The majority verdict of ``votes`` (non-empty), with its agreement and signed margin; with
    ``winner`` (an adjudicated verdict), that verdict's agreement and margin instead."""
    if not votes:
        raise ValueError("a consensus needs at least one vote")
    return _majority(tuple(sorted(votes)), max_strength, winner)


@functools.lru_cache(maxsize=65536)
def _majority(votes: tuple[Vote, ...], max_strength: int, winner: str | None) -> PairConsensus:
    """``majority_consensus`` of a sorted ballot. Cached: a million comparisons have a few hundred
    ballots between them (the consensus is immutable)."""
    counts = Counter(vote.choice for vote in votes)
    winner = winner or _winner(counts)
    agreement = counts.get(winner, 0) / len(votes)
    margin = 0.0
    if winner in (Choice.A, Choice.B):
        loser = Choice.B if winner == Choice.A else Choice.A
        signed = sum(
            v.strength if v.choice == winner else -v.strength if v.choice == loser else 0
            for v in votes
        )
        margin = signed / (len(votes) * max_strength)
    return PairConsensus(choice=winner, agreement=round(agreement, 6), margin=round(margin, 6))


def _sha256_files(*paths: Path, prefix: bytes = b"") -> str:
    digest = hashlib.sha256(prefix)
    for path in paths:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def export_folder_sha256(folder: Path, options: dict | None = None) -> str:
    """The SHA-256 an export's folder holds: the export's ``sha256`` when the files are the
    export's. A pairwise export's hash covers its pairs then its raw judgements; a rating or
    ranking project's (``options["data_file"]``, annotation.services.item_exports) the data
    file's name, then that file, then its items file."""
    data_file = (options or {}).get("data_file")
    if data_file is None:
        return _sha256_files(folder / PAIRS_FILE, folder / JUDGEMENTS_FILE)
    return item_files_sha256(folder, data_file)


def item_files_sha256(folder: Path, data_file: str) -> str:
    """The hash of an item export's files in ``folder``: the data file's name (so that two
    formats with the same rows, none for instance, are two exports), the file, the items file."""
    return _sha256_files(folder / data_file, folder / ITEMS_FILE, prefix=f"{data_file}\n".encode())


def export_data_path(export: DatasetExport) -> Path:
    """The file a run trains on: the export's ``options["data_file"]``, pairs.jsonl when it does
    not say (a pairwise export)."""
    return Path(export.folder) / export.options.get("data_file", PAIRS_FILE)


# One encoder for every line: ``json.dumps`` with options builds a new encoder on each call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


def _dump(row: dict) -> str:
    """One JSONL line: ``json.dumps(row, ensure_ascii=False, sort_keys=True)`` and a newline."""
    return _ENCODER.encode(row) + "\n"


def prompt_answer(prompt: Prompt) -> str | None:
    """The prompt's reference answer as text (``metadata["answer"]``; a number as its text) or None.
    ValueError naming the prompt when the stored value is neither a text nor a number."""
    return _metadata_answer(prompt.metadata, prompt.pk)


def _metadata_answer(metadata: object, prompt_id: int) -> str | None:
    """``prompt_answer`` of a prompt's stored ``metadata`` (prompt ``prompt_id``)."""
    answer = metadata.get("answer") if isinstance(metadata, dict) else None
    if answer is None:
        return None
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise ValueError(
            f"prompt {prompt_id}: metadata.answer must be a text or a number, got {answer!r}"
        )
    return str(answer)


def dawid_skene_consensus(posterior: dict[str, float]) -> PairConsensus:
    """A Dawid-Skene posterior as a consensus: the most probable verdict (a split as in the
    majority rule), its probability as the agreement, and ``side_margin``, P(chosen) - P(rejected),
    as the margin (0 for a tie or both bad)."""
    choice = _winner(posterior)
    row = np.array([[posterior.get(name, 0.0) for name in CHOICES]])
    margin = float(side_margin(row, np.array([CHOICES.index(choice)]))[0])
    return PairConsensus(
        choice=choice, agreement=round(posterior[choice], 6), margin=round(margin, 6)
    )


EXPORT_CHUNK = 2000  # comparisons whose rows are written together (memory holds one chunk)
Progress = Callable[[int, int], None]  # (comparisons written, comparisons to write)


@dataclass(frozen=True)
class _Posteriors:
    """Dawid-Skene posteriors of the judged comparisons as arrays (a dict per comparison costs
    about 1 kB each: a gigabyte at 1,000,000). ids [I] sorted; posterior [I, K], CHOICES order."""

    ids: np.ndarray
    posterior: np.ndarray

    def get(self, comparison_id: int) -> dict[str, float]:
        """The comparison's posterior rounded to 6 digits, as ``project_consensus`` gives it."""
        i = int(np.searchsorted(self.ids, comparison_id))
        return {
            name: round(float(p), 6) for name, p in zip(CHOICES, self.posterior[i], strict=True)
        }


def _dawid_skene_posteriors(project: Project) -> _Posteriors:
    from annotation import agreement
    from annotation.selectors.agreement import project_judgements

    data = project_judgements(project=project)
    fit = agreement.table_dawid_skene(data.table)
    judged = np.unique(data.table.item)
    return _Posteriors(ids=data.comparison_ids[judged], posterior=fit.consensus.posterior[judged])


def _pair_line(comparison: PairTexts, ballot: list[Vote], consensus: PairConsensus,
               rule: str, adjudicated: bool) -> str:  # fmt: skip
    a = (comparison.a_text, comparison.a_model)
    b = (comparison.b_text, comparison.b_model)
    chosen, rejected = (b, a) if consensus.choice == Choice.B else (a, b)
    answer = _metadata_answer(comparison.prompt_metadata, comparison.prompt_id)
    return _dump(
        {
            **({"answer": answer} if answer is not None else {}),
            "prompt": comparison.prompt_messages or comparison.prompt_text,
            "chosen": chosen[0],
            "rejected": rejected[0],
            "margin": consensus.margin,
            "chosen_side": "b" if consensus.choice == Choice.B else "a",
            "consensus": "adjudicated" if adjudicated else rule,
            "tie": consensus.choice == Choice.TIE,
            "n_judgements": len(ballot),
            "agreement": consensus.agreement,
            "comparison_id": comparison.pk,
            "cluster": comparison.cluster,
            "external_id": comparison.external_id,
            "model_chosen": chosen[1],
            "model_rejected": rejected[1],
        }
    )


def _write_files(
    project: Project,
    folder: Path,
    *,
    keep_ties: bool,
    min_judgements: int,
    consensus_rule: str,
    fallback: str = "majority",
    progress: Progress | None = None,
) -> tuple[int, int, int, int]:
    """Write pairs and judgements into ``folder``, streamed: EXPORT_CHUNK comparisons at a time
    (their judgements from a server-side cursor, then the comparisons with their texts), both files
    appended in comparison order, so memory holds one chunk (and, for Dawid-Skene, the posterior
    array). ``progress(done, total)`` after each chunk, in judged comparisons. Returns (pairs,
    judgements, ties dropped, pairs from adjudication)."""
    n_pairs = n_judgements = n_ties = n_adjudicated = done = 0
    verdicts = adjudicated_choices(project=project) if consensus_rule == "adjudicated" else {}
    rule = fallback if consensus_rule == "adjudicated" else consensus_rule
    total = (
        human_judgements(Judgement.objects.filter(comparison__project=project))
        .values("comparison_id").distinct().count()
    )  # fmt: skip
    posteriors = _dawid_skene_posteriors(project) if rule == "dawid_skene" and total else None
    with (
        (folder / JUDGEMENTS_FILE).open("w", encoding="utf-8") as raw,
        (folder / PAIRS_FILE).open("w", encoding="utf-8") as pairs,
    ):
        for chunk, texts in chunks_read_ahead(project, size=EXPORT_CHUNK):
            votes: dict[int, list[Vote]] = {}
            for cid, rows in chunk:
                raw.writelines(row[3] for row in rows)
                votes[cid] = [Vote(row[1], row[2]) for row in rows]
                n_judgements += len(rows)
            for comparison in texts:
                if comparison.pk not in votes:
                    continue  # read by the id range, never judged
                ballot = votes[comparison.pk]
                if len(ballot) < min_judgements:
                    continue
                verdict = verdicts.get(comparison.pk)
                consensus = (
                    dawid_skene_consensus(posteriors.get(comparison.pk))
                    if posteriors is not None and verdict is None
                    else majority_consensus(
                        ballot, max_strength=project.strength_scale, winner=verdict
                    )
                )
                if consensus.choice == Choice.BOTH_BAD:
                    continue
                if consensus.choice == Choice.TIE and not keep_ties:
                    n_ties += 1
                    continue
                pairs.write(_pair_line(comparison, ballot, consensus, rule, verdict is not None))
                n_pairs += 1
                n_adjudicated += verdict is not None
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    return n_pairs, n_judgements, n_ties, n_adjudicated


def dataset_export(
    *,
    project: Project,
    keep_ties: bool = False,
    min_judgements: int = 1,
    consensus: str = "majority",
    fallback: str = "majority",
    created_by: AbstractBaseUser | None = None,
    progress: Progress | None = None,
) -> DatasetExport:
    """Freeze the project's current judgements into a hashed export (or return the identical one).
    ``fallback``: the rule for comparisons without a verdict under ``consensus="adjudicated"``;
    ``progress(done, total)``: called as the files are written (judged comparisons). A rating or
    ranking project has no comparisons to export: ValueError naming ``export_items``."""
    if project.task_type != TaskType.PAIRWISE:
        raise ValueError(
            f"{project.slug} is a {project.task_type} project: export its items with python "
            f"manage.py export_items --project {project.slug} --format FORMAT --out FILE "
            "(--snapshot instead of --out: a training export, item_dataset_export)"
        )
    if consensus not in CONSENSUS_RULES:
        raise ValueError(f"unknown consensus rule {consensus!r}; expected one of {CONSENSUS_RULES}")
    if fallback not in FALLBACK_RULES:
        raise ValueError(f"unknown fallback rule {fallback!r}; expected one of {FALLBACK_RULES}")
    if min_judgements < 1:
        raise ValueError("min_judgements must be at least 1")
    root = Path(settings.EXPORT_DIR) / project.slug
    root.mkdir(parents=True, exist_ok=True)
    options = {"keep_ties": keep_ties, "min_judgements": min_judgements, "consensus": consensus}
    if consensus == "adjudicated":
        options["fallback"] = fallback
    with tempfile.TemporaryDirectory(dir=root, prefix=".export-") as scratch:
        staging = Path(scratch)
        n_pairs, n_judgements, n_ties, n_adjudicated = _write_files(
            project, staging, keep_ties=keep_ties, min_judgements=min_judgements,
            consensus_rule=consensus, fallback=fallback, progress=progress,
        )  # fmt: skip
        if consensus == "adjudicated":
            options["pairs_adjudicated"] = n_adjudicated
        sha = _sha256_files(staging / PAIRS_FILE, staging / JUDGEMENTS_FILE)
        existing = DatasetExport.objects.filter(sha256=sha).first()
        if existing is not None:
            return existing
        manifest = {
            "project": project.slug,
            "sha256": sha,
            "options": options,
            "pairs": n_pairs,
            "judgements": n_judgements,
            "ties_dropped": n_ties,
            "pairs_adjudicated": n_adjudicated,
            "guidelines_versions": judgements_per_version(project=project),
        }
        folder = export_folder_publish(staging, root / sha, manifest)
    return export_row_create(
        project=project,
        created_by=created_by,
        sha256=sha,
        folder=str(folder),
        options=options,
        n_pairs=n_pairs,
        n_judgements=n_judgements,
        n_ties_dropped=n_ties,
    )


def export_folder_publish(staging: Path, folder: Path, manifest: dict) -> Path:
    """Write ``manifest`` into the scratch folder ``staging`` (a TemporaryDirectory's path) and
    move it to ``folder``, the export's hashed folder (left as it is when it exists: the same
    content). The scratch path is made again, empty, for its TemporaryDirectory to remove."""
    (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
    if not folder.exists():
        staging.rename(folder)
        staging.mkdir()  # TemporaryDirectory removes its own path on exit
    return folder


def export_row_create(**fields) -> DatasetExport:
    """The DatasetExport row of a published folder; the row of the same hash when someone made the
    same export at the same moment."""
    try:
        with transaction.atomic():
            return DatasetExport.objects.create(**fields)
    except IntegrityError:
        return DatasetExport.objects.get(sha256=fields["sha256"])


def export_copy(export: DatasetExport, out: Path) -> tuple[Path, Path]:
    """Copy an export's files to ``out`` (pairs) and ``out`` with ``.judgements.jsonl`` (raw rows)."""
    folder = Path(export.folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw_out = out.with_name(out.name.removesuffix(".jsonl") + ".judgements.jsonl")
    shutil.copyfile(folder / PAIRS_FILE, out)
    shutil.copyfile(folder / JUDGEMENTS_FILE, raw_out)
    return out, raw_out
