"""Stored consensus (issue 30): the rows the database keeps per judged comparison equal a full
recomputation after any sequence of submits, edits and deletes; the refit stores Dawid-Skene's own
posterior; the refit is debounced; the backfill command fills existing projects."""

import random

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection

from annotation import agreement
from annotation.agreement import CHOICES, MISSING
from annotation.models import (
    AnnotatorConfusion,
    Comparison,
    ConsensusFit,
    Judgement,
    StoredConsensus,
)
from annotation.services import consensus as consensus_services
from annotation.services.agreement import project_consensus
from annotation.services.consensus import consensus_refit
from annotation.services.labelling import Verdict, judgement_edit
from common.roles import machine_account_mark
from tests.factories import JudgementFactory, ProjectFactory, UserFactory
from tests.helpers.annotation_data import make_pair

pytestmark = pytest.mark.django_db

FIELDS = ("a", "b", "tie", "both_bad")
needs_triggers = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the incremental update is PostgreSQL's triggers"
)


def _stored(project) -> dict[int, dict]:
    return {
        row["comparison_id"]: row
        for row in StoredConsensus.objects.filter(project=project).values()
    }


def _recomputed(project) -> dict[int, dict]:
    """Every judged comparison's figures from scratch: all of people's votes and the stored fit,
    through the pure ``agreement.stored_figures``."""
    machines = set(
        UserFactory._meta.model.objects.filter(groups__name="Machine judge").values_list(
            "pk", flat=True
        )
    )
    ids = sorted(Comparison.objects.filter(project=project).values_list("pk", flat=True))
    votes = [
        (ids.index(cid), who, CHOICES.index(choice))
        for cid, who, choice in Judgement.objects.filter(comparison__project=project).values_list(
            "comparison_id", "annotator_id", "choice"
        )
        if who not in machines
    ]
    fit = ConsensusFit.objects.filter(project=project).first()
    log_priors = np.array(
        [getattr(fit, f"log_prior_{name}") for name in FIELDS] if fit else [0.0] * 4
    )
    rows = {
        (row.annotator_id, row.said): [getattr(row, f"log_{name}") for name in FIELDS]
        for row in AnnotatorConfusion.objects.filter(project=project)
    }
    item = np.array([v[0] for v in votes], np.int64)
    choice = np.array([v[2] for v in votes], np.int64)
    vote_log = np.array([rows.get((v[1], CHOICES[v[2]]), [0.0] * 4) for v in votes]).reshape(-1, 4)
    figures = agreement.stored_figures(
        item, choice, vote_log, n_items=len(ids), log_priors=log_priors
    )

    def name(code) -> str:
        return CHOICES[int(code)] if code != MISSING else ""

    return {
        ids[i]: {
            "n_votes": int(figures.n_votes[i]),
            "n_choices": int(figures.n_choices[i]),
            "majority_choice": name(figures.majority[i]),
            "majority_margin": float(figures.majority_margin[i]),
            "split": bool(figures.split[i]),
            "ds_choice": name(figures.ds_label[i]),
            "ds_margin": float(figures.ds_margin[i]),
            **{f"p_{n}": float(figures.posterior[i, k]) for k, n in enumerate(FIELDS)},
        }
        for i in np.flatnonzero(figures.n_votes)
    }


def _assert_same(project) -> None:
    stored, expected = _stored(project), _recomputed(project)
    assert set(stored) == set(expected)
    for cid, want in expected.items():
        got = stored[cid]
        for key in ("n_votes", "n_choices", "majority_choice", "majority_margin", "split"):
            assert got[key] == want[key], (cid, key)  # majority: exactly
        assert got["ds_choice"] == want["ds_choice"], cid
        for key in ("ds_margin", "p_a", "p_b", "p_tie", "p_both_bad"):
            assert got[key] == pytest.approx(want[key], abs=1e-12), (cid, key)


@pytest.fixture
def world():
    project = ProjectFactory(overlap=3)
    pairs = [make_pair(project, prompt=f"prompt {i}") for i in range(12)]
    people = [UserFactory(username=f"p{i}") for i in range(5)]
    machine = UserFactory(username="judge:x:y:v1")
    machine_account_mark(user=machine)
    return project, pairs, people, machine


@needs_triggers
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_rows_equal_a_full_recomputation_after_random_changes(world, seed):
    """Random submits (one by one and in bulk), edits (save and queryset update), deletes (one, a
    queryset, a whole comparison) and a machine judge's verdicts, with a refit part-way: after each
    step the database's rows equal a recomputation from scratch (majority exactly, Dawid-Skene to
    1e-12 with the fit of the moment)."""
    project, pairs, people, machine = world
    rng = random.Random(seed)
    for step in range(40):
        existing = list(Judgement.objects.filter(comparison__project=project))
        op = rng.choice(["submit", "submit", "bulk", "edit", "update", "delete", "machine"])
        if step == 20:
            consensus_refit(project=project, force=True)
        elif op == "submit" or not existing:
            pair, who = rng.choice(pairs), rng.choice(people)
            if not Judgement.objects.filter(comparison=pair, annotator=who).exists():
                JudgementFactory(comparison=pair, annotator=who, choice=rng.choice(FIELDS))
        elif op == "bulk":
            taken = set(existing and [(j.comparison_id, j.annotator_id) for j in existing])
            fresh = {
                (p.pk, w.pk): Judgement(comparison=p, annotator=w, choice=rng.choice(FIELDS))
                for p in rng.sample(pairs, 4)
                for w in rng.sample(people, 2)
                if (p.pk, w.pk) not in taken
            }
            Judgement.objects.bulk_create(list(fresh.values()))
        elif op == "edit":
            judgement = rng.choice(existing)
            judgement.choice = rng.choice(FIELDS)
            judgement.save()
        elif op == "update":
            Judgement.objects.filter(annotator=rng.choice(people)).update(choice=rng.choice(FIELDS))
        elif op == "delete":
            rng.choice(existing).delete()
        else:
            pair = rng.choice(pairs)
            Judgement.objects.get_or_create(
                comparison=pair, annotator=machine, defaults={"choice": "b"}
            )
        _assert_same(project)
    victim = rng.choice(pairs)
    Comparison.objects.filter(pk=victim.pk).delete()
    _assert_same(project)
    assert not StoredConsensus.objects.filter(comparison_id=victim.pk).exists()


@needs_triggers
def test_an_edit_through_the_labelling_service_updates_its_row_in_the_same_transaction(world):
    project, pairs, people, _ = world
    judgement = JudgementFactory(comparison=pairs[0], annotator=people[0], choice="a")
    JudgementFactory(comparison=pairs[0], annotator=people[1], choice="a")
    assert _stored(project)[pairs[0].pk]["majority_choice"] == "a"
    judgement_edit(annotator=people[0], judgement_id=judgement.pk, verdict=Verdict(pick="right"))
    row = _stored(project)[pairs[0].pk]
    assert (row["majority_choice"], row["split"], row["majority_margin"]) == ("", True, 0.0)


def test_a_refit_stores_dawid_skenes_own_posterior(world):
    """After a refit every row holds the posterior and label of ``dawid_skene`` on the whole project
    (the export's and the agreement report's consensus), on any database."""
    project, pairs, people, _ = world
    rng = random.Random(5)
    for pair in pairs[:10]:
        for who in rng.sample(people, 3):
            JudgementFactory(
                comparison=pair, annotator=who, choice=rng.choice(["a", "a", "b", "tie"])
            )
    result = consensus_refit(project=project)
    assert result.refitted and result.n_rows == 10 and result.n_judgements == 30
    assert AnnotatorConfusion.objects.filter(project=project).count() == 5 * 4
    stored, fitted = _stored(project), project_consensus(project=project, method="dawid_skene")
    assert set(stored) == set(fitted)
    for cid, want in fitted.items():
        assert stored[cid]["ds_choice"] == (want["choice"] or "")
        for name in FIELDS:
            assert stored[cid][f"p_{name}"] == pytest.approx(want["posterior"][name], abs=1e-6)
    assert consensus_refit(project=project).refitted is False  # nothing changed since
    _assert_same(project)


@needs_triggers
def test_a_vote_by_an_annotator_the_fit_has_not_seen_counts_for_the_majority_only(world):
    project, pairs, people, _ = world
    JudgementFactory(comparison=pairs[0], annotator=people[0], choice="a")
    JudgementFactory(comparison=pairs[0], annotator=people[1], choice="a")
    consensus_refit(project=project)
    before = _stored(project)[pairs[0].pk]
    newcomer = UserFactory(username="newcomer")
    JudgementFactory(comparison=pairs[0], annotator=newcomer, choice="b")
    after = _stored(project)[pairs[0].pk]
    assert (after["n_votes"], after["n_choices"]) == (3, 2)
    assert after["majority_margin"] == pytest.approx(1 / 3)
    assert after["p_a"] == pytest.approx(before["p_a"], abs=1e-12)


def test_refits_are_debounced_into_one_task(world, monkeypatch, settings):
    """Many schedules in one window queue one refit; once it ran, the next schedule queues again."""
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "s30"}
    }
    from annotation.tasks import consensus_refit as task

    project = world[0]
    sent = []
    monkeypatch.setattr(task, "apply_async", lambda **kwargs: sent.append(kwargs))
    assert consensus_services.consensus_refit_schedule(project=project) is True
    assert [consensus_services.consensus_refit_schedule(project=project) for _ in range(5)] == [
        False
    ] * 5
    assert len(sent) == 1 and sent[0]["args"] == [project.pk]
    assert task.apply(args=[project.pk]).get()["status"] == "done"
    assert consensus_services.consensus_refit_schedule(project=project) is True


def test_the_backfill_command_fits_every_project(world, capsys):
    project, pairs, people, _ = world
    JudgementFactory(comparison=pairs[0], annotator=people[0], choice="a")
    JudgementFactory(comparison=pairs[1], annotator=people[1], choice="b")
    StoredConsensus.objects.filter(project=project).delete()
    ConsensusFit.objects.filter(project=project).delete()
    call_command("consensus_backfill")
    assert set(_stored(project)) == {pairs[0].pk, pairs[1].pk}
    assert ConsensusFit.objects.filter(project=project).exists()
    assert project.slug in capsys.readouterr().out


def test_the_backfill_command_refuses_an_unknown_project():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no project 'nope'"):
        call_command("consensus_backfill", "--project", "nope")
