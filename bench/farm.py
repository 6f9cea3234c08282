"""The gold-reward farm (issue #34): the whole RLHF loop run on itself, on CPU, through Concord's own
services and recipes, with a frozen "gold" reward model standing in for what people want.

One pipeline run (``run_pipeline``), all through the app:

1. a project (``project_get_or_create``) with the pairs imported (``comparisons_import``): HH-RLHF
   harmless prompts, each with its chosen and rejected answer (sides shuffled);
2. simulated annotators (``annotation.simulation``: gold's Bradley-Terry probability bent by the
   demo habits: careful, position bias, length bias, fast and noisy) label through the labelling
   services: ``assignment_claim`` (claims, leases, overlap, the side shown left) and
   ``judgement_submit``, until the label budget is spent; *Concord* with ``active_rounds`` spends
   it in rounds, the queue re-ordered between them by a provisional ensemble's acquisition scores
   (``label_actively``);
3. consensus and export (``dataset_export``: majority for *plain*, Dawid-Skene for *Concord*), a
   snapshot, a reward-model run and an RLOO run against it (``run_create``, ``run_launch``, the
   worker's ``run_execute``: metrics, checkpoints, samples and alerts land in the database);
4. gold scores the policy's answers at every evaluation (the run's stored samples): a
   ``gold_reward_mean`` metric point beside the proxy's ``eval_reward_mean``;
5. the stop rule: *plain* keeps the last step (fixed steps); *Concord* rates each gold-rated
   checkpoint against the base (the starting policy) in an eval round and follows the stopping
   panel: when every round loses to the base it rejects the run and keeps the base; else it
   reads the panel's peak line (``run_peak_line``: the proxy curve corrected by gold) and rolls
   back to the checkpoint nearest the estimated peak, or keeps the checkpoint of the best gold
   point when the peak is not determined (too few points, flat, still rising, or a turn within
   the noise). Either way the decision is recorded (``decision_record``);
6. gold win rate of the kept checkpoint (or the kept base) against the starting policy on
   held-out prompts (greedy answers, gold scores; a tie counts a half).

``--small`` (the CI configuration, tiny 2-layer Llamas built from configs, a few minutes on a loaded
CPU) checks the loop closes; it does not say anything about quality. The default configuration is
bigger but still CPU-sized; see the README's stopping section for what it measured.

Run: ``python bench/farm.py --small --seeds 0 1 2`` (a fresh test database is made and dropped;
DATABASE_URL names the server). Writes bench/results/farm[-small].json and .png.
``python bench/farm.py --rescore bench/results/farm-synthetic-36steps.json`` judges a committed
report again from its recorded curves (today's alarms, stop rules and panel line; no training, no
database) and rewrites it with its PNG.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.farm_eval import checkpoint_curve, gold_rated_round, policy_answers  # noqa: E402
from bench.farm_plot import plot  # noqa: E402
from bench.farm_policy import pretrained_tiny_models  # noqa: E402
from bench.farm_rules import (  # noqa: E402
    alarm_signals,
    alarm_timeline,
    compare_stop_rules,
    panel_peak_line,
)
from bench.farm_synthetic import synthetic_corpus, synthetic_pairs  # noqa: E402

PIPELINES = ("plain", "concord")
HH_FILE = "hh-rlhf_harmless-base_test.jsonl.gz"


@dataclass(frozen=True)
class FarmConfig:
    """One farm's sizes. data: ``synthetic`` (the built-in domain of bench/farm_synthetic.py, its
    gold a known function: runs anywhere) or ``hh`` (HH-RLHF harmless rows from the shared data,
    gold a reward model trained on ``gold_pairs`` of them, ``held_out`` kept for its accuracy).
    pairs: rows (prompt, better, worse) for labelling; label_budget: judgements the annotators may
    submit (both pipelines alike); overlap: annotators per pair; rm_steps / rl_steps: optimiser
    steps of the reward model and of RLOO; eval_every: RLOO evaluates and checkpoints this often;
    max_chars: HH texts are cut to this many characters; polite_bias: the synthetic data's
    spurious stock phrase (farm_synthetic.synthetic_pairs); pretrain_steps: language-model steps
    that make the tiny policy answer in the domain's words before the loop (0: none);
    ensemble_size, objectives: the Concord pipeline's reward-model ensemble (heads) and its RL
    runs, one per objective (mean, wco, uwo: Gao's shape for each) on the same ensemble;
    gold_every, kl_target: the peak-fit rule's gold points (every n-th checkpoint, as human-eval
    rounds are rarer than evaluations; the stopping panel sees only those) and the fixed-KL
    rule's KL (nats), farm_rules' stop rules; hidden_size: the tiny models' width (the built-in
    domain's topics need 128); tiny_learning_rate: the tiny reward models' and policies' learning
    rate (SmolLM2's is 1e-5); active_rounds, acquisition: the Concord pipeline's active
    collection (``label_actively``): the label budget spent in ``active_rounds`` + 1 rounds, the
    labelling queue re-ordered by the ``acquisition`` strategy (annotation.models.QueueOrder) of
    a provisional ensemble after each round but the last (0: no active collection);
    eval_kl_samples: the RLOO runs' answers per held-out prompt for the evaluation KL; clusters:
    the Concord pipeline's cluster-balanced batches (``cluster_prompts``: the app's Sentence-BERT
    and KMeans clustering of the prompts into this many clusters before labelling; 0: none)."""

    name: str
    data: str = "synthetic"
    pairs: int = 24
    gold_pairs: int = 0
    held_out: int = 0
    eval_prompts: int = 8
    label_budget: int = 48
    overlap: int = 2
    rm_steps: int = 12
    rl_steps: int = 6
    eval_every: int = 2
    rloo_k: int = 2
    batch_size: int = 4
    max_new_tokens: int = 12
    max_chars: int = 160
    gold_steps: int = 40
    tiny: bool = True
    polite_bias: float = 0.0
    pretrain_steps: int = 30
    ensemble_size: int = 3
    objectives: tuple[str, ...] = ("uwo",)
    gold_every: int = 3
    kl_target: float = 1.0
    annotators: tuple[str, ...] = ("careful", "left", "longer", "random")
    hidden_size: int = 32
    tiny_learning_rate: float = 1e-3
    active_rounds: int = 0
    acquisition: str = "disagreement"
    eval_kl_samples: int = 1
    clusters: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


SMALL = FarmConfig(name="small", active_rounds=1, clusters=2)
FULL = FarmConfig(
    name="full", data="hh", pairs=64, gold_pairs=600, held_out=120, eval_prompts=16,
    label_budget=128, rm_steps=40, rl_steps=24, eval_every=4, max_new_tokens=16, gold_steps=200,
    pretrain_steps=0,
)  # fmt: skip
HH_SMALL = FarmConfig(
    name="hh-small", data="hh", gold_pairs=160, held_out=40, max_new_tokens=8, pretrain_steps=0
)
# The hackable farm (issue #34's proxy demo and Gao's shape): the built-in domain with the stock
# phrase on 70% of the better answers in the labelled pairs, a policy pre-trained to answer in
# the domain's words, long enough RLOO runs to over-optimise, one Concord run per objective.
SYNTHETIC = FarmConfig(
    name="synthetic", pairs=48, eval_prompts=12, label_budget=96, rm_steps=30, rl_steps=12,
    eval_every=2, rloo_k=2, batch_size=4, max_new_tokens=16, polite_bias=0.7, pretrain_steps=150,
    objectives=("mean", "wco", "uwo"), kl_target=2.0,
)  # fmt: skip
# The same domain where both tiny models can learn it (2026-12-07): at width 32 the pre-trained
# policy's answers scored below zero under gold (it never learned which words go with a prompt's
# topic) and the reward models ranked them against gold from the start; at width 128 with 1,500
# pre-training steps and three times the labels, gold rises before it falls.
SYNTHETIC_WIDE = dataclasses.replace(
    SYNTHETIC, name="synthetic-wide", pairs=144, eval_prompts=32, label_budget=288, rm_steps=600,
    rl_steps=24, pretrain_steps=1500, hidden_size=128,
)  # fmt: skip
CONFIGS = {c.name: c for c in (SMALL, HH_SMALL, FULL, SYNTHETIC, SYNTHETIC_WIDE)}


# --- data -------------------------------------------------------------------------------------------


def hh_rows(data_dir: Path, limit: int, max_chars: int) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) from HH-RLHF harmless-base: the last human turn as the prompt and
    the two final assistant turns as the answers, cut to ``max_chars`` characters; rows whose
    answers are the same once cut are skipped."""
    rows = []
    with gzip.open(data_dir / HH_FILE, "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            parts = [_last_turns(row["chosen"]), _last_turns(row["rejected"])]
            if None in parts:
                continue
            (prompt, chosen), (_, rejected) = parts  # type: ignore[misc]
            chosen, rejected = chosen[:max_chars].strip(), rejected[:max_chars].strip()
            if chosen and rejected and chosen != rejected:
                rows.append((prompt[:max_chars].strip(), chosen, rejected))
            if len(rows) >= limit:
                break
    return rows


def _last_turns(text: str) -> tuple[str, str] | None:
    human, sep, answer = text.rpartition("\n\nAssistant:")
    if not sep:
        return None
    prompt = human.rpartition("\n\nHuman:")[2]
    return (prompt.strip(), answer.strip()) if prompt.strip() and answer.strip() else None


# --- gold -------------------------------------------------------------------------------------------


@dataclass
class Gold:
    """The frozen gold reward model: its folder, its held-out pairwise accuracy, and a scorer."""

    folder: Path
    accuracy: float
    n_held_out: int

    def score(self, prompts: Sequence[str], answers: Sequence[str]) -> np.ndarray:
        """Gold rewards [N] of (prompt, answer) pairs."""
        from training.recipes import reward_scores

        conversations = [[{"role": "user", "content": p}] for p in prompts]
        return np.asarray(reward_scores(self.folder, conversations, list(answers), max_length=256))


@dataclass
class ProgrammaticGold:
    """Gold as a known function: the built-in domain's ``gold_reward`` (bench/farm_synthetic.py).
    It is the truth by construction (accuracy 1, nothing held out)."""

    accuracy: float = 1.0
    n_held_out: int = 0

    def score(self, prompts: Sequence[str], answers: Sequence[str]) -> np.ndarray:
        """Gold rewards [N] of (prompt, answer) pairs."""
        from bench.farm_synthetic import gold_rewards

        return gold_rewards(prompts, answers)


def train_gold(config: FarmConfig, rows: list[tuple[str, str, str]], base: Path, out: Path) -> Gold:
    """Gold: a reward model trained by the reward-model recipe on ``rows`` minus ``held_out`` of
    them, its accuracy measured on those (share of pairs where chosen scores above rejected)."""
    from training.recipes import RewardModelConfig, run_training

    train, test = rows[config.held_out :], rows[: config.held_out]
    data = out / "gold-pairs.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": p, "chosen": c, "rejected": r}) + "\n" for p, c, r in train)
    )
    result = run_training(
        RewardModelConfig(
            model=str(base), data=str(data), output_dir=str(out / "gold"), batch_size=8,
            max_steps=config.gold_steps, learning_rate=1e-3 if config.tiny else 2e-5,
            max_length=256, checkpoint_every=0, device="cpu", eval_fraction=0.0,
        )
    )  # fmt: skip
    gold = Gold(Path(result.final_model_dir), 0.0, len(test))
    chosen = gold.score([p for p, _, _ in test], [c for _, c, _ in test])
    rejected = gold.score([p for p, _, _ in test], [r for _, _, r in test])
    gold.accuracy = float(np.mean(chosen > rejected))
    return gold


# --- one pipeline -----------------------------------------------------------------------------------


def _annotators(names: Sequence[str]) -> list[tuple[Any, Any]]:
    """(user, profile) per habit: the demo profiles of annotation.simulation, as annotator accounts."""
    from django.contrib.auth import get_user_model

    from annotation.simulation import DEMO_ANNOTATORS
    from common.roles import ANNOTATOR, role_assign

    by_habit = {p.habit: p for p in DEMO_ANNOTATORS.values()}
    people = []
    for habit in names:
        user, _ = get_user_model().objects.get_or_create(username=f"farm-{habit}")
        role_assign(user=user, role=ANNOTATOR)
        people.append((user, by_habit[habit]))
    return people


def consensus_accuracy(folder: Path, gold_of: dict[int, tuple[float, float]]) -> float | None:
    """The share of an export's pairs (``pairs.jsonl`` in ``folder``; ties left out) whose
    consensus chose gold's better answer: how much of the labels' truth the consensus rule kept.
    ``gold_of``: comparison id -> gold rewards (A, B). None when nothing was exported."""
    right = []
    with (folder / "pairs.jsonl").open() as rows:
        for line in rows:
            row = json.loads(line)
            if row["tie"]:
                continue
            g_a, g_b = gold_of[row["comparison_id"]]
            right.append((row["chosen_side"] == "a") == (g_a > g_b))
    return float(np.mean(right)) if right else None


def reward_model_accuracy(folder: Path, rows: Sequence[tuple[str, str, str]]) -> float:
    """The reward model's (an ensemble's member mean) pairwise accuracy on held-out ``rows``
    (prompt, better, worse): the share where it scores the better answer higher (a tie a half)."""
    from training.recipes.scoring import load_reward_ensemble

    ensemble = load_reward_ensemble(folder, "cpu", max_length=256, prompt_budget=128)
    prompts = [p for p, _, _ in rows]
    better = ensemble.score(prompts, [b for _, b, _ in rows]).numpy().mean(axis=0)
    worse = ensemble.score(prompts, [w for _, _, w in rows]).numpy().mean(axis=0)
    return win_rate(better, worse)


def cluster_prompts(project: Any, k: int) -> dict[str, Any] | None:
    """Cluster-balanced batches, as a project gets them in the app: a clustering run of the
    project's prompts (``clustering_run_request`` then ``clustering_run_execute`` in process:
    Sentence-BERT embeddings, KMeans into ``k`` clusters), after which the project's default
    queue order (cluster-balanced) hands pairs out in batches that mix the clusters; active
    collection's orders mix them too. None for k 0 (no clustering). Returns the run's id, k and
    the clusters' sizes (largest first)."""
    if not k:
        return None
    from annotation.services.clustering import clustering_run_execute, clustering_run_request

    run, _ = clustering_run_request(project=project, k=k)
    run = clustering_run_execute(run_id=run.pk)
    sizes = sorted(run.clusters.values_list("size", flat=True), reverse=True)
    return {"run": run.pk, "k": run.k, "sizes": sizes, "queue_order": project.queue_order}


def label_through_services(
    project: Any, gold_of: dict[int, tuple[float, float]], people: list, budget: int, seed: int
) -> int:
    """Simulated annotators claim pairs and submit verdicts through the labelling services until
    ``budget`` judgements are in or nothing is left. ``gold_of``: comparison id -> gold rewards
    (A, B). Each verdict: gold's Bradley-Terry draw or the annotator's habit (simulate_judgements),
    on the side the claim showed left (a position-biased annotator picks that side). Returns the
    number of judgements submitted."""
    from annotation.services.labelling import Verdict, assignment_claim, judgement_submit
    from annotation.simulation import simulate_judgements
    from common.sides import LEFT, RIGHT

    rng = np.random.default_rng(seed)
    done, idle = 0, 0
    while done < budget and idle < len(people):
        idle = 0
        for user, profile in people:
            if done >= budget:
                break
            assignment = assignment_claim(annotator=user, project=project)
            if assignment is None:
                idle += 1
                continue
            comparison = assignment.comparison
            r_a, r_b = gold_of[comparison.pk]
            drawn = simulate_judgements(
                profile, [r_a], [r_b], [len(comparison.response_a.text)],
                [len(comparison.response_b.text)], rng,
            )  # fmt: skip
            choice = str(drawn.choice[0])
            if profile.habit == "left" and bool(drawn.habit_decided[0]):
                choice = assignment.shown_left
            pick = choice
            if choice in ("a", "b"):
                pick = LEFT if choice == assignment.shown_left else RIGHT
            judgement_submit(
                annotator=user, assignment_id=assignment.pk,
                verdict=Verdict(pick=pick, strength=int(drawn.strength[0])),
                elapsed_ms=int(drawn.elapsed_ms[0]), project=project,
            )  # fmt: skip
            done += 1
    return done


def _execute(run: Any, user: Any) -> Any:
    """Launch the run through the service and run it on this process's worker path."""
    from training import services
    from training.models import TrainingRun
    from training.worker import run_execute

    services.run_launch(run=run, user=user)
    run.refresh_from_db()
    if run.status == TrainingRun.Status.QUEUED:  # the broker did not run it eagerly
        run_execute(run_id=run.pk, worker="farm")
    run.refresh_from_db()
    if run.status != TrainingRun.Status.SUCCEEDED:
        raise RuntimeError(
            f"farm run #{run.pk} ({run.kind}) ended {run.status}: {run.error[-2000:]}"
        )
    return run


def win_rate(ours: np.ndarray, theirs: np.ndarray) -> float:
    """Share of prompts where ours scores above theirs under gold, a tie counting a half: [N] x2."""
    return float(np.mean((ours > theirs) + 0.5 * (ours == theirs)))


def run_pipeline(
    config: FarmConfig,
    pipeline: str,
    seed: int,
    *,
    rows: list[tuple[str, str, str]],
    eval_rows: list[tuple[str, str, str]],
    gold: Gold | ProgrammaticGold,
    base_model: str,
    start_policy: Path,
) -> list[dict[str, Any]]:
    """One pipeline (``plain`` or ``concord``) at one seed, end to end (module docstring): the
    labels, consensus and reward model once, then one RL run per objective (plain: one run on its
    single reward model; concord: one per ``config.objectives`` on its ensemble). One result each;
    its ``cpu_s`` counts the shared part and its own run."""
    from django.contrib.auth import get_user_model

    from annotation.services.exporting import dataset_export
    from annotation.services.importing import comparisons_import, project_get_or_create
    from common.roles import ML_ENGINEER, role_assign
    from training import services

    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}, got {pipeline!r}")
    started = time.process_time()
    rng = np.random.default_rng(seed)
    engineer, _ = get_user_model().objects.get_or_create(username="farm-engineer")
    role_assign(user=engineer, role=ML_ENGINEER)
    project, _ = project_get_or_create(slug=f"farm-{pipeline}-{seed}", overlap=config.overlap)
    lines, golden = [], {}
    for i, (prompt, chosen, rejected) in enumerate(rows):
        a, b = (chosen, rejected) if rng.random() < 0.5 else (rejected, chosen)
        lines.append(
            json.dumps({"prompt": prompt, "response_a": a, "response_b": b, "id": f"pair-{i}"})
        )
        golden[f"pair-{i}"] = (prompt, a, b)
    comparisons_import(project=project, lines=lines)
    scores_a = gold.score([g[0] for g in golden.values()], [g[1] for g in golden.values()])
    scores_b = gold.score([g[0] for g in golden.values()], [g[2] for g in golden.values()])
    by_external = dict(zip(golden, zip(scores_a, scores_b, strict=True), strict=True))
    gold_of = {c.pk: by_external[c.external_id] for c in project.comparisons.all()}
    people = _annotators(config.annotators)
    consensus = "majority" if pipeline == "plain" else "dawid_skene"
    clusters = cluster_prompts(project, config.clusters) if pipeline == "concord" else None
    if pipeline == "concord" and config.active_rounds:
        labels, active = label_actively(
            config, project, gold_of, people, seed,
            engineer=engineer, base_model=base_model, consensus=consensus,
        )  # fmt: skip
    else:
        labels = label_through_services(project, gold_of, people, config.label_budget, seed)
        active = []
    snapshot = services.snapshot_for(export=dataset_export(project=project, consensus=consensus))
    held_out = [
        json.dumps({"prompt": p, "response_a": a, "response_b": b, "id": f"held-out-{i}"})
        for i, (p, a, b) in enumerate(eval_rows)
    ]  # after the export: prompts the runs never trained on, for the eval round
    comparisons_import(project=project, lines=held_out)
    size = 1 if pipeline == "plain" else config.ensemble_size
    rm = _execute(
        services.run_create(
            name=f"farm rm {pipeline} {seed}", kind="rm", base_model=base_model,
            snapshot=snapshot, created_by=engineer, config=_rm_config(config, seed, size),
        ),
        engineer,
    )  # fmt: skip
    quality = {"exported_pairs": snapshot.export.n_pairs,
               "consensus_accuracy": consensus_accuracy(Path(snapshot.export.folder), gold_of),
               "rm_accuracy": reward_model_accuracy(Path(rm.output_dir) / "final", eval_rows)}  # fmt: skip
    shared = {**quality, "pipeline": pipeline, "seed": seed, "labels": labels, "consensus": consensus,
              "ensemble_size": size, "rm_run": rm.pk, "active": active,
              "clusters": clusters}  # fmt: skip
    shared_cpu = time.process_time() - started
    results = []
    for objective in ("single",) if size == 1 else config.objectives:
        begun = time.process_time()
        outcome = rl_and_stop(
            config, pipeline, seed, objective, rm=rm, engineer=engineer, eval_rows=eval_rows,
            gold=gold, base_model=base_model, start_policy=start_policy,
        )  # fmt: skip
        own = time.process_time() - begun
        results.append({**shared, **outcome, "cpu_s": shared_cpu + own})
    return results


def _common(config: FarmConfig, seed: int) -> dict[str, Any]:
    rate = config.tiny_learning_rate if config.tiny else 1e-5
    return {"max_length": 256, "learning_rate": rate, "seed": seed}


def _rm_config(config: FarmConfig, seed: int, size: int) -> dict[str, Any]:
    """A reward-model run's configuration: one model, or ``size`` heads on a shared encoder."""
    ensemble = {"ensemble_size": size, "ensemble_mode": "heads"} if size > 1 else {}
    return {**_common(config, seed), "max_steps": config.rm_steps, "batch_size": 4,
            "checkpoint_every": 0, "eval_fraction": 0.0, **ensemble}  # fmt: skip


def round_budgets(budget: int, rounds: int) -> list[int]:
    """``budget`` labels in ``rounds`` + 1 rounds, as equal as whole labels allow, the larger
    rounds first: [rounds + 1] ints summing to ``budget``. ValueError for a negative argument."""
    if budget < 0 or rounds < 0:
        raise ValueError(f"budget and rounds must be >= 0, got {budget} and {rounds}")
    parts = rounds + 1
    return [budget // parts + (1 if i < budget % parts else 0) for i in range(parts)]


def label_actively(
    config: FarmConfig,
    project: Any,
    gold_of: dict[int, tuple[float, float]],
    people: list,
    seed: int,
    *,
    engineer: Any,
    base_model: str,
    consensus: str,
) -> tuple[int, list[dict[str, Any]]]:
    """Active collection, as a project runs it in the app: the project's queue order set to
    ``config.acquisition`` (``project_update``), then the budget labelled in rounds
    (``round_budgets``); after each round but the last, a provisional reward-model ensemble
    (the final one's configuration) is trained on the ``consensus`` export so far and scores every
    comparison (``comparisons_score``: the preference and disagreement stored, the labelling
    queue re-ordered by the strategy with its exploration share), so the next round's claims
    take the pairs it ranks first. Returns (labels submitted, one row per re-ordering: the
    labels before it, the provisional run's id, the comparisons scored)."""
    from annotation.services.exporting import dataset_export
    from annotation.services.projects import project_update
    from training import services
    from training.continuous_services import comparisons_score

    project = project_update(project=project, actor=engineer, queue_order=config.acquisition)
    budgets = round_budgets(config.label_budget, config.active_rounds)
    done, rounds = 0, []
    for index, budget in enumerate(budgets):
        done += label_through_services(project, gold_of, people, budget, seed * 100 + index)
        if index == len(budgets) - 1:
            break
        export = dataset_export(project=project, consensus=consensus)
        provisional = _execute(
            services.run_create(
                name=f"farm active rm {seed} round {index + 1}", kind="rm",
                base_model=base_model, snapshot=services.snapshot_for(export=export),
                created_by=engineer, config=_rm_config(config, seed, config.ensemble_size),
            ),
            engineer,
        )  # fmt: skip
        scored = comparisons_score(project=project, folder=Path(provisional.output_dir) / "final")
        rounds.append({"labels": done, "rm_run": provisional.pk, "scored": scored})
    return done, rounds


def rl_and_stop(
    config: FarmConfig,
    pipeline: str,
    seed: int,
    objective: str,
    *,
    rm: Any,
    engineer: Any,
    eval_rows: list[tuple[str, str, str]],
    gold: Gold | ProgrammaticGold,
    base_model: str,
    start_policy: Path,
) -> dict[str, Any]:
    """One RLOO run against ``rm`` under ``objective`` (``single``: a plain reward model), its
    checkpoints' curve, *concord*'s gold-rated eval rounds against the base on each rated
    checkpoint (``base_rounds``), the stop decision (``concord_decision``) recorded, a gold-rated
    eval round on the kept checkpoint (none when the run is rejected: the starting policy is kept
    and its win rate against itself is 0.5), the gold win rate, the alarms' timeline and the stop
    rules' verdicts."""
    from monitoring.selectors.stopping_panel import run_peak_line
    from monitoring.services.eval_rounds import decision_record
    from training import services

    rl = _execute(
        services.run_create(
            name=f"farm rloo {pipeline} {objective} {seed}", kind="rloo", base_model=base_model,
            snapshot=rm.snapshot, created_by=engineer, reward_model_run=rm,
            config={**_common(config, seed), "max_steps": config.rl_steps, "epochs": 50,
                    "batch_size": config.batch_size,
                    "rloo_k": config.rloo_k, "max_new_tokens": config.max_new_tokens,
                    "eval_every": config.eval_every, "checkpoint_every": config.eval_every,
                    "keep_checkpoints": config.rl_steps // config.eval_every + 1,
                    "eval_prompts": config.eval_prompts, "missing_eos_penalty": 0.0,
                    "eval_kl_samples": config.eval_kl_samples,
                    **({} if objective == "single" else {"reward_objective": objective})},
        ),
        engineer,
    )  # fmt: skip
    eval_prompts = [p for p, _, _ in eval_rows]
    curve = checkpoint_curve(
        rl, Path(rm.output_dir) / "final", gold, eval_prompts, start_policy=start_policy,
        max_new_tokens=config.max_new_tokens, gold_every=config.gold_every,
    )  # fmt: skip
    peak = run_peak_line(rl, rated_rounds=[], n_boot=300)
    rated_steps = {row["step"]: row["gold"] for row in curve if row.get("gold_rated")}
    round_of = {"project": rm.snapshot.export.project, "gold": gold, "baseline_model": base_model,
                "size": len(eval_rows), "max_new_tokens": config.max_new_tokens, "seed": seed}  # fmt: skip
    base_rounds = []
    if pipeline == "concord":  # a gold-rated round against the base on each rated checkpoint
        base_rounds = [
            {"step": step, **gold_rated_round(checkpoint=rl.checkpoints.get(step=step), **round_of)}
            for step in sorted(rated_steps)
        ]
    kept, decision, rule = concord_decision(rl, pipeline, rated_steps, peak)
    decision_record(
        run=rl, decision=decision, reviewer=engineer, checkpoint=kept,
        note=f"farm {pipeline}: {rule}; {peak.text}",
    )  # fmt: skip
    eval_prompts = [p for p, _, _ in eval_rows]
    start = gold.score(
        eval_prompts, policy_answers(start_policy, eval_prompts, config.max_new_tokens)
    )
    rated, ours = None, start  # rejected: the base (the starting policy) is the result
    if kept is not None:
        rated = next((r for r in base_rounds if r["step"] == kept.step), None)
        rated = rated or gold_rated_round(checkpoint=kept, **round_of)
        ours = gold.score(
            eval_prompts, policy_answers(kept.path, eval_prompts, config.max_new_tokens)
        )
    alerts = list(rl.alerts.order_by("step").values_list("metric", "step"))
    return {
        "objective": objective, "rl_run": rl.pk, "kept_step": 0 if kept is None else kept.step,
        "decision": decision, "stop_rule": rule, "peak_line": peak.text, "eval_round": rated,
        "base_rounds": base_rounds, "gold_win_rate": win_rate(ours, start),
        "gold_reward": float(ours.mean()), "gold_reward_start": float(start.mean()),
        "curve": curve, "alerts": [{"metric": m, "step": s} for m, s in alerts],
        **judge_curve(curve, config),
    }  # fmt: skip


def concord_decision(
    run: Any, pipeline: str, rated_steps: dict[int, float], peak: Any
) -> tuple[Any, str, str]:
    """(kept checkpoint or None, decision, rule) for a finished RL run. *plain*: the last step
    (fixed steps). *concord*, in the stopping panel's order: reject the run and keep the base
    (None) when the panel advises it (every gold-rated round against the base under 0.5); else
    the checkpoint nearest the peak line's estimate; else the best gold-rated checkpoint."""
    from monitoring.selectors.stopping_panel import run_stopping_panel

    if pipeline == "plain" or not rated_steps:
        return run.checkpoints.order_by("-step").first(), "rollback", "fixed steps"
    panel = run_stopping_panel(run, n_boot=300)["panel"]
    if panel is not None and panel.keep_base:
        return None, "reject", "keep the base (every rated round lost to it)"
    if peak.checkpoint is not None:  # "step N"
        step = int(str(peak.checkpoint).removeprefix("step "))
        return run.checkpoints.get(step=step), "rollback", "peak estimate"
    best = max(rated_steps, key=lambda step: rated_steps[step])
    return (
        run.checkpoints.get(step=best),
        "rollback",
        "best gold-rated checkpoint (peak not determined)",
    )


def judge_curve(curve: list[dict[str, Any]], config: FarmConfig) -> dict[str, Any]:
    """A run's ``alarms`` (farm_rules.alarm_timeline) and ``stop_rules`` (compare_stop_rules, with
    the configuration's fixed KL and gold points) from its curve."""
    timeline = alarm_timeline(curve, alarm_signals(curve))
    verdicts = compare_stop_rules(
        curve, gold_start=curve[0]["gold"], kl_target=config.kl_target, gold_every=config.gold_every
    )
    return {"alarms": asdict(timeline), "stop_rules": [asdict(v) for v in verdicts]}


# --- the farm ---------------------------------------------------------------------------------------


def mean_interval(
    values: Sequence[float], *, level: float = 0.9, seed: int = 0
) -> dict[str, float]:
    """Mean of ``values`` with a percentile bootstrap interval (2000 resamples; one value: a point)."""
    array = np.asarray(values, dtype=float)
    if array.size < 2:
        value = float(array.mean()) if array.size else float("nan")
        return {"mean": value, "low": value, "high": value, "n": int(array.size)}
    rng = np.random.default_rng(seed)
    means = rng.choice(array, size=(2000, array.size)).mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return {"mean": float(array.mean()), "low": float(low), "high": float(high), "n": array.size}


def farm_rows(config: FarmConfig) -> list[tuple[str, str, str]]:
    """(prompt, better, worse) rows: gold's training rows, the labelled rows, then the evaluation
    prompts' rows, in that order; the built-in domain's (seed 0) or HH-RLHF's from the shared data
    (``CONCORD_SHARED_DATA``, else ../shared/data). ValueError when the file gives too few."""
    needed = config.gold_pairs + config.pairs + config.eval_prompts
    if config.data == "synthetic":
        return synthetic_pairs(needed, 0, polite_bias=config.polite_bias)
    if config.data != "hh":
        raise ValueError(f"data must be 'synthetic' or 'hh', got {config.data!r}")
    data_dir = Path(os.environ.get("CONCORD_SHARED_DATA", ROOT.parent / "shared" / "data"))
    every = hh_rows(data_dir, needed, config.max_chars)
    if len(every) < needed:
        raise ValueError(f"{HH_FILE} gave {len(every)} usable rows, the config needs {needed}")
    return every


def farm_corpus(config: FarmConfig, rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """The tiny tokenizer's training texts: the rows' texts (twice), plus the built-in domain's
    words and phrase for the synthetic data."""
    texts = [text for row in rows for text in row] * 2
    return synthetic_corpus(rows) + texts if config.data == "synthetic" else texts


def variant_name(result: dict[str, Any], config: FarmConfig) -> str:
    """The summary's key of a run: ``plain``, or ``concord`` with its objective when the config
    compares objectives (``concord-wco``)."""
    if result["pipeline"] == "plain" or len(config.objectives) == 1:
        return result["pipeline"]
    return f"{result['pipeline']}-{result['objective']}"


def summarise(results: Sequence[dict[str, Any]], config: FarmConfig) -> dict[str, Any]:
    """Per variant (``variant_name``): gold win rate, gold reward, labels and CPU seconds, each a
    mean with a 90% bootstrap interval over the seeds."""
    summary = {}
    for name in dict.fromkeys(variant_name(r, config) for r in results):
        mine = [r for r in results if variant_name(r, config) == name]
        summary[name] = {
            key: mean_interval([r[key] for r in mine])
            for key in ("gold_win_rate", "gold_reward", "labels", "cpu_s")
        }
    return summary


def merge_reports(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One report from farm runs of one configuration at different seeds (run side by side as
    separate processes): runs joined in seed order, their alarms and stop rules judged again from
    their curves (``judge_curve``), the summary recomputed."""
    names = {r["config"]["name"] for r in reports}
    if len(names) != 1:
        raise ValueError(f"reports of different configurations: {sorted(names)}")
    objectives = dict.fromkeys(o for r in reports for o in r["config"]["objectives"])
    name = names.pop()
    recorded = {k: tuple(v) if isinstance(v, list) else v for k, v in reports[0]["config"].items()}
    config = dataclasses.replace(FarmConfig(**recorded), name=name, objectives=tuple(objectives))
    runs = sorted((run for r in reports for run in r["runs"]), key=lambda run: run["seed"])
    for run in runs:  # the judges of today's farm_rules on the recorded curves
        run.update(judge_curve(run["curve"], config))
    return {
        **reports[0], "seeds": sorted({s for r in reports for s in r["seeds"]}), "runs": runs,
        "summary": summarise(runs, config),
        "cpu_s_total": sum(r["cpu_s_total"] for r in reports),
        "parts": [{"seeds": r["seeds"], "cpu_s_total": r["cpu_s_total"]} for r in reports],
    }  # fmt: skip


def rescore_report(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` judged again by today's rules from its recorded curves, no training: each run's
    ``alarms`` and ``stop_rules`` (``judge_curve``) and ``panel_now``, the stopping panel's peak
    line on its curve (``farm_rules.panel_peak_line``) and the checkpoint it names (None when the
    peak is not determined: the Concord pipeline then keeps the best gold-rated checkpoint). What
    ran at the time (``peak_line``, ``kept_step``, the gold win rate of the kept checkpoint) is kept
    as recorded: re-keeping a checkpoint would need its answers generated again."""
    recorded = {k: tuple(v) if isinstance(v, list) else v for k, v in report["config"].items()}
    config = FarmConfig(**recorded)
    runs = []
    for run in report["runs"]:
        line = panel_peak_line(run["curve"])
        panel = {"peak_line": line.text, "checkpoint": line.checkpoint,
                 "status": line.estimate.status, "reason": line.estimate.reason}  # fmt: skip
        runs.append({**run, **judge_curve(run["curve"], config), "panel_now": panel})
    return {**report, "runs": runs}


def run_farm(
    config: FarmConfig,
    seeds: Sequence[int],
    workdir: Path,
    *,
    partial: Path | None = None,
    pipelines: Sequence[str] = PIPELINES,
    cache: Path | None = None,
) -> dict[str, Any]:
    """Gold, then the pipelines (both by default) at every seed; the summary with intervals. Needs
    Django set up with a database, and ``settings.CONCORD_MODELS_DIR`` writable (the base model
    goes there). ``partial``: a file rewritten with the runs done so far after each pipeline;
    ``cache``: where the tiny models' pre-trained policy is kept between farms
    (``farm_policy.pretrained_tiny_models``; the report's ``cpu_s_total`` then leaves its
    pre-training out, ``start_policy_cached`` says so)."""
    from django.conf import settings

    started = time.process_time()
    every = farm_rows(config)
    gold_rows = every[: config.gold_pairs]
    rows = every[config.gold_pairs : config.gold_pairs + config.pairs]
    eval_rows = every[config.gold_pairs + config.pairs :]
    models = Path(settings.CONCORD_MODELS_DIR)
    base_model = "smollm2-135m-instruct"
    from_cache = False
    if config.tiny:
        answers = [(p, a) for p, better, worse in every for a in (better, worse)]
        policy, rm_base, from_cache = pretrained_tiny_models(
            workdir / "tiny", farm_corpus(config, every), answers,
            hidden_size=config.hidden_size, steps=config.pretrain_steps, cache=cache,
        )  # fmt: skip
        shutil.copytree(policy, models / base_model, dirs_exist_ok=True)
        gold_base, start_policy = rm_base, policy
    else:
        start_policy = models / base_model
        gold_base = start_policy
    gold: Gold | ProgrammaticGold = (
        ProgrammaticGold()
        if config.data == "synthetic"
        else train_gold(config, gold_rows, gold_base, workdir)
    )
    gold_cpu = time.process_time() - started
    results: list[dict[str, Any]] = []
    for seed in seeds:
        for pipeline in pipelines:
            results += run_pipeline(
                config, pipeline, seed, rows=rows, eval_rows=eval_rows, gold=gold,
                base_model=base_model, start_policy=start_policy,
            )  # fmt: skip
            if partial is not None:  # what is done so far, should the farm be stopped
                partial.write_text(json.dumps({"config": asdict(config), "runs": results},
                                              default=float))  # fmt: skip
    summary = summarise(results, config)
    return {
        "config": asdict(config),
        "seeds": list(seeds),
        "gold": {
            "kind": "programmatic" if config.data == "synthetic" else "reward model",
            "accuracy": gold.accuracy,
            "held_out_pairs": gold.n_held_out,
            "cpu_s": gold_cpu,
        },
        "summary": summary,
        "runs": results,
        "cpu_s_total": time.process_time() - started,
        "start_policy_cached": from_cache,
    }


def config_override(
    config: FarmConfig, assignments: Sequence[str], *, name: str | None = None
) -> FarmConfig:
    """``config`` with ``FIELD=VALUE`` assignments applied, each value read as its field's type
    (a bool from true/false/1/0, a tuple from a comma-separated list). The result is named
    ``name``, else after the configuration and the assignments (``synthetic-label_budget=240``).
    ValueError for an unknown field, a malformed assignment or a value of the wrong type."""
    fields = {f.name for f in dataclasses.fields(FarmConfig)} - {"name", "extra"}
    changes: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        if not sep or key not in fields:
            raise ValueError(
                f"expected FIELD=VALUE with FIELD one of {sorted(fields)}: {assignment!r}"
            )
        current = getattr(config, key)
        if isinstance(current, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"{key} takes true or false, got {text!r}")
            changes[key] = text.lower() in ("true", "1")
        elif isinstance(current, tuple):
            changes[key] = tuple(part for part in text.split(",") if part)
        else:
            changes[key] = type(current)(text)
    suffix = "-".join(assignments)
    label = name or (f"{config.name}-{suffix}" if suffix else config.name)
    return dataclasses.replace(config, name=label, **changes)


def _setup_django(*, eager: bool = True) -> Any:
    """Django with a fresh test database (created here, dropped by the caller's teardown). With
    ``eager`` the broker is answered in-process (every task runs on this process, as the tests
    do); without, tasks go to ``CELERY_BROKER_URL`` with no worker behind it: the farm still
    executes its training runs and round generation itself, and the dashboards' debounced
    refreshes (an agreement report after every judgement, a stopping panel after every rating,
    seconds each on a loaded machine) are left queued."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    from config.celery import app

    app.conf.task_always_eager = eager
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    return old_name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the CI configuration: tiny models")
    parser.add_argument(
        "--config", choices=sorted(CONFIGS), help="a named configuration (default: full)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument(
        "--objectives", nargs="+", choices=("mean", "wco", "uwo"),
        help="the Concord runs' objectives (default: the configuration's)",
    )  # fmt: skip
    parser.add_argument(
        "--merge", type=Path, nargs="+", help="join these JSON reports (one per seed) and stop"
    )
    parser.add_argument(
        "--rescore", type=Path,
        help="judge this JSON report again from its recorded curves (no training), rewrite it",
    )  # fmt: skip
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES))
    parser.add_argument(
        "--rl-steps", type=int,
        help="RLOO steps (default: the configuration's); the report is named after them",
    )  # fmt: skip
    parser.add_argument("--eval-every", type=int, help="RLOO evaluates this often (steps)")
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="FIELD=VALUE",
        help="override fields of the configuration (label_budget=240 polite_bias=0.3; tuples "
        "comma-separated); the report is named after them unless --name is given",
    )  # fmt: skip
    parser.add_argument("--name", help="the configuration's (and the report's) name")
    parser.add_argument(
        "--no-side-tasks", action="store_true",
        help="send tasks to the broker with no worker: the dashboards' refreshes do not run",
    )  # fmt: skip
    parser.add_argument(
        "--no-cache", action="store_true",
        help="pre-train the tiny policy again instead of copying it from var/cache/farm/",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.rescore:
        report = rescore_report(json.loads(args.rescore.read_text()))
        args.rescore.write_text(json.dumps(report, indent=2, default=float) + "\n")
        plot(report, args.rescore.with_suffix(".png"))
        return 0
    if args.merge:
        merged = merge_reports([json.loads(path.read_text()) for path in args.merge])
        stem = f"farm-{merged['config']['name']}"
        (args.out / f"{stem}.json").write_text(json.dumps(merged, indent=2, default=float) + "\n")
        plot(merged, args.out / f"{stem}.png")
        print(json.dumps(merged["summary"], indent=2))
        return 0
    config = SMALL if args.small else CONFIGS[args.config or "full"]
    if args.objectives:
        config = dataclasses.replace(config, objectives=tuple(args.objectives))
    if args.rl_steps or args.eval_every:
        steps, every = args.rl_steps or config.rl_steps, args.eval_every or config.eval_every
        name = f"{config.name}-{steps}steps"
        config = dataclasses.replace(config, name=name, rl_steps=steps, eval_every=every)
    if args.set or args.name:
        config = config_override(config, args.set, name=args.name)
    old_name = _setup_django(eager=not args.no_side_tasks)
    from django.conf import settings
    from django.db import connection

    try:
        with tempfile.TemporaryDirectory(prefix="concord-farm-") as scratch:
            work = Path(scratch)
            settings.EXPORT_DIR = work / "exports"
            settings.CONCORD_RUNS_DIR = work / "runs"
            if config.tiny:
                settings.CONCORD_MODELS_DIR = work / "models"
                (work / "models").mkdir()
            args.out.mkdir(parents=True, exist_ok=True)
            partial = args.out / f"farm-{config.name}.partial.json"
            cache = None if args.no_cache else ROOT / "var" / "cache" / "farm"
            report = run_farm(
                config, args.seeds, work, partial=partial, pipelines=args.pipelines, cache=cache
            )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    report["machine"] = {"cpu_count": os.cpu_count(), "precision": "float32", "device": "cpu"}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "farm" if config is FULL else f"farm-{config.name}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=float) + "\n")
    try:
        plot(report, args.out / f"{stem}.png")
    except ImportError:  # matplotlib is the bench extra's: draw later with bench/farm_plot.py
        print(f"matplotlib missing: no PNG; run bench/farm_plot.py {args.out / stem}.json")
    print(json.dumps({"gold": report["gold"], "summary": report["summary"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
