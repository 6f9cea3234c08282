"""The export's files as they were written before issue 30 streamed them (one dict of every vote,
then every comparison): the reference the streamed export is held to, byte for byte.

Kept verbatim from ``annotation/services/exporting.py`` at commit 5fdce50 (``_write_files``), with
its imports; only the name changed.
"""

from pathlib import Path

from annotation.models import Choice, Comparison, Judgement, Project
from annotation.selectors.adjudication import adjudicated_choices
from annotation.services.exporting import (
    JUDGEMENTS_FILE,
    PAIRS_FILE,
    Vote,
    _dump,
    dawid_skene_consensus,
    majority_consensus,
    prompt_answer,
)
from common.roles import human_judgements


def write_files_before_streaming(
    project: Project,
    folder: Path,
    *,
    keep_ties: bool,
    min_judgements: int,
    consensus_rule: str,
    fallback: str = "majority",
) -> tuple[int, int, int, int]:
    """Write pairs and judgements into ``folder``; returns (pairs, judgements, ties dropped, pairs
    from adjudication)."""
    n_pairs = n_judgements = n_ties = n_adjudicated = 0
    verdicts = adjudicated_choices(project=project) if consensus_rule == "adjudicated" else {}
    rule = fallback if consensus_rule == "adjudicated" else consensus_rule
    votes: dict[int, list[Vote]] = {}
    with (folder / JUDGEMENTS_FILE).open("w", encoding="utf-8") as raw:
        judgements = (
            human_judgements(Judgement.objects.filter(comparison__project=project))
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
    if rule == "dawid_skene" and votes:
        from annotation.services.agreement import project_consensus

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
            verdict = verdicts.get(comparison.pk)
            consensus = (
                dawid_skene_consensus(posteriors[comparison.pk]["posterior"])
                if rule == "dawid_skene" and verdict is None
                else majority_consensus(ballot, max_strength=project.strength_scale, winner=verdict)
            )
            if consensus.choice == Choice.BOTH_BAD:
                continue
            if consensus.choice == Choice.TIE and not keep_ties:
                n_ties += 1
                continue
            a, b = comparison.response_a, comparison.response_b
            chosen, rejected = (b, a) if consensus.choice == Choice.B else (a, b)
            prompt = comparison.prompt
            answer = prompt_answer(prompt)
            pairs.write(
                _dump(
                    {
                        **({"answer": answer} if answer is not None else {}),
                        "prompt": prompt.messages if prompt.messages else prompt.text,
                        "chosen": chosen.text,
                        "rejected": rejected.text,
                        "margin": consensus.margin,
                        "chosen_side": "b" if consensus.choice == Choice.B else "a",
                        "consensus": rule if verdict is None else "adjudicated",
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
            n_adjudicated += verdict is not None
    return n_pairs, n_judgements, n_ties, n_adjudicated
