"""The fast full refit of the stored consensus (issue 30): the EM on judged items only, its warm
start from a stored fit, the set-based rewrite of the rows, and what the item page shows before a
project's first fit."""

import random

import numpy as np
import pytest
from django.db import connection
from django.urls import reverse

from annotation import agreement
from annotation.agreement import MISSING
from annotation.models import ConsensusFit, StoredConsensus
from annotation.selectors.agreement import project_judgements, project_votes
from annotation.services import consensus as consensus_services
from annotation.services.consensus import consensus_refit
from tests.factories import JudgementFactory, ProjectFactory, UserFactory
from tests.helpers.annotation_data import make_pair
from tests.helpers.clients import logged_in

FIELDS = ("a", "b", "tie", "both_bad")
# Known confusion matrices P(said | true), true a / b / tie rows, said a / b / tie columns.
CAREFUL = [[0.85, 0.10, 0.05], [0.10, 0.85, 0.05], [0.15, 0.15, 0.70]]
SWAPPER = [[0.30, 0.65, 0.05], [0.65, 0.30, 0.05], [0.20, 0.20, 0.60]]


def _simulated(n_items: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three of six annotators (four careful, two swappers) vote on each item: item, annotator,
    label [3 * n_items]."""
    rng = np.random.default_rng(seed)
    confusion = np.array([CAREFUL] * 4 + [SWAPPER] * 2)
    truth = rng.choice(3, size=n_items, p=[0.45, 0.45, 0.10])
    item, annotator, label = [], [], []
    for i in range(n_items):
        for r in rng.choice(6, size=3, replace=False):
            item.append(i)
            annotator.append(r)
            label.append(rng.choice(3, p=confusion[r, truth[i]]))
    return np.array(item), np.array(annotator), np.array(label)


def test_unjudged_items_change_nothing_but_get_the_priors():
    """The EM runs on judged items only: adding 500 unjudged items leaves the judged posteriors,
    the confusion matrices and the iterations as they were (to rounding), and the unjudged items
    get the priors, no label and no margin."""
    item, annotator, label = _simulated()
    alone = agreement.dawid_skene(item, annotator, label, n_items=300, n_annotators=6)
    padded = agreement.dawid_skene(item * 2, annotator, label, n_items=800, n_annotators=6)
    assert padded.iterations == alone.iterations
    np.testing.assert_allclose(
        padded.consensus.posterior[:600:2], alone.consensus.posterior, atol=1e-12
    )
    np.testing.assert_allclose(padded.confusion, alone.confusion, atol=1e-12)
    assert padded.log_likelihood == pytest.approx(alone.log_likelihood, abs=1e-9)
    unjudged = np.r_[np.arange(1, 600, 2), np.arange(600, 800)]
    np.testing.assert_allclose(
        padded.consensus.posterior[unjudged], np.tile(padded.priors, (500, 1))
    )
    assert (padded.consensus.label[unjudged] == MISSING).all()
    assert np.isnan(padded.consensus.margin[unjudged]).all()


def test_a_warm_start_from_a_converged_fit_stops_at_once_near_it():
    """Started from its own fit (run to a tight tolerance) the EM gains almost nothing in its
    first rounds and stops after two (the first has nothing to compare with), posteriors within
    1e-6 of the fit it started from."""
    item, annotator, label = _simulated()
    fit = agreement.dawid_skene(item, annotator, label, n_items=300, n_annotators=6, tol=1e-13,
                                max_iter=2000)  # fmt: skip
    warm = agreement.dawid_skene(
        item, annotator, label, n_items=300, n_annotators=6,
        init_confusion=fit.confusion, init_priors=fit.priors,
    )  # fmt: skip
    assert warm.iterations == 2
    np.testing.assert_allclose(warm.consensus.posterior, fit.consensus.posterior, atol=1e-6)


def test_a_warm_start_of_the_wrong_shape_is_refused():
    item, annotator, label = _simulated(n_items=10)
    with pytest.raises(ValueError, match="init_confusion must be"):
        agreement.dawid_skene(item, annotator, label, n_items=10, n_annotators=6,
                              init_confusion=np.full((5, 4, 4), 0.25))  # fmt: skip
    with pytest.raises(ValueError, match="init_priors must be"):
        agreement.dawid_skene(item, annotator, label, n_items=10, n_annotators=6,
                              init_confusion=np.full((6, 4, 4), 0.25), init_priors=np.ones(3))  # fmt: skip


@pytest.fixture
def judged(db):
    """12 comparisons, 10 of them judged by 3 of 5 people (a, b or tie)."""
    project = ProjectFactory(overlap=3)
    pairs = [make_pair(project, prompt=f"prompt {i}") for i in range(12)]
    people = [UserFactory(username=f"p{i}") for i in range(5)]
    rng = random.Random(7)
    for pair in pairs[:10]:
        for who in rng.sample(people, 3):
            JudgementFactory(
                comparison=pair, annotator=who, choice=rng.choice(["a", "a", "b", "tie"])
            )
    return project, pairs, people


def _posteriors(project) -> dict[int, list[float]]:
    return {
        row[0]: list(row[1:])
        for row in StoredConsensus.objects.filter(project=project).values_list(
            "comparison_id", *(f"p_{name}" for name in FIELDS)
        )
    }


def test_a_cold_refit_stores_the_exports_posterior_and_a_warm_one_starts_from_the_fit(judged):
    """The first fit and any ``warm=False`` refit are the export's fit (same EM from the majority
    vote) to 1e-9; a warm refit on the same judgements starts from the stored fit, so it runs
    at most as many EM rounds."""
    project, _, _ = judged
    first = consensus_refit(project=project)
    data = project_judgements(project=project)  # the export's read and fit
    fit = agreement.table_dawid_skene(data.table)
    stored = _posteriors(project)
    judged_items = np.flatnonzero(np.bincount(data.table.item, minlength=data.table.n_items))
    assert set(stored) == {int(data.comparison_ids[i]) for i in judged_items}
    for i in judged_items:
        want = fit.consensus.posterior[i]
        assert stored[int(data.comparison_ids[i])] == pytest.approx(list(want), abs=1e-9)
    assert first.iterations == fit.iterations
    warm = consensus_refit(project=project, force=True)
    assert warm.refitted and warm.iterations <= first.iterations
    cold = consensus_refit(project=project, force=True, warm=False)
    assert cold.iterations == first.iterations
    again = _posteriors(project)
    for cid, want in stored.items():
        assert again[cid] == pytest.approx(want, abs=1e-12)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the set-based write is PostgreSQL's")
def test_the_refit_repairs_missing_and_stray_rows(judged):
    """The rewrite inserts the row of a judged comparison the table lacks and deletes the row of a
    comparison without votes (rows the triggers would never leave, written here behind them)."""
    project, pairs, _ = judged
    consensus_refit(project=project)
    kept = StoredConsensus.objects.get(comparison=pairs[0])
    StoredConsensus.objects.filter(comparison=pairs[0]).delete()
    stray = StoredConsensus.objects.get(comparison=pairs[1])
    stray.pk = pairs[11].pk
    stray.comparison_id = pairs[11].pk
    stray.save(force_insert=True)
    result = consensus_refit(project=project, force=True, warm=False)
    assert result.n_rows == 10
    assert not StoredConsensus.objects.filter(comparison=pairs[11]).exists()
    back = StoredConsensus.objects.get(comparison=pairs[0])
    assert (back.n_votes, back.majority_choice) == (kept.n_votes, kept.majority_choice)
    assert back.p_a == pytest.approx(kept.p_a, abs=1e-12)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="rows before a fit are the triggers'")
def test_before_the_first_fit_the_item_page_shows_the_vote_shares_with_a_note(judged, ml_engineer):
    """Until the project's first fit the stored posterior is uniform (margin 0): the item page's
    Dawid-Skene row shows the vote shares and their margin instead, marked "not fitted yet";
    after the fit, the stored posterior without the note."""
    project, _, people = judged
    pair = make_pair(project, prompt="fresh")
    for who, choice in zip(people[:3], ["a", "a", "b"], strict=True):
        JudgementFactory(comparison=pair, annotator=who, choice=choice)
    assert not ConsensusFit.objects.filter(project=project).exists()
    assert StoredConsensus.objects.get(comparison=pair).ds_margin == 0.0
    url = reverse("annotation:item", args=[project.slug, pair.pk])
    page = logged_in(ml_engineer).get(url)
    row = {r.rule: r for r in page.context["item"].consensus}["Dawid-Skene"]
    assert row.note.startswith("not fitted yet")
    assert (row.choice, row.margin) == ("a", pytest.approx(1 / 3))
    assert row.posterior["a"] == pytest.approx(2 / 3)
    assert "not fitted yet" in page.content.decode()
    consensus_refit(project=project)
    row = {r.rule: r for r in logged_in(ml_engineer).get(url).context["item"].consensus}[
        "Dawid-Skene"
    ]
    stored = StoredConsensus.objects.get(comparison=pair)
    assert row.note == ""
    assert (row.margin, row.posterior["a"]) == (stored.ds_margin, stored.p_a)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent rows are the triggers'")
def test_a_row_whose_votes_changed_since_the_read_keeps_the_triggers_figures(judged):
    """A judgement committed between the refit's read and its write: the write leaves that row as
    the trigger wrote it (its new vote counted, the fit of the moment) instead of putting back the
    figures of the votes it read; the other rows get the new fit."""
    project, pairs, people = judged
    consensus_refit(project=project)
    votes = project_votes(project=project)  # the refit's read ...
    late = next(p for p in people if not pairs[0].judgements.filter(annotator=p).exists())
    JudgementFactory(comparison=pairs[0], annotator=late, choice="both_bad")  # ... then a vote
    by_trigger = StoredConsensus.objects.get(comparison=pairs[0])
    assert by_trigger.n_votes == 4
    StoredConsensus.objects.filter(comparison=pairs[1]).update(p_a=0.25)
    fit = agreement.table_dawid_skene(votes.table)
    consensus_services._rewrite_rows(project, votes, fit)  # ... and the write
    kept = StoredConsensus.objects.get(comparison=pairs[0])
    assert (kept.n_votes, kept.p_a, kept.ds_margin) == (4, by_trigger.p_a, by_trigger.ds_margin)
    assert StoredConsensus.objects.get(comparison=pairs[1]).p_a != 0.25


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's VACUUM")
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_refit_that_wrote_many_rows_vacuums_the_table_after_it_commits(monkeypatch):
    """Outside a transaction, a refit writing VACUUM_FROM_ROWS rows or more vacuums the stored
    consensus (the margin walks then read the index alone); inside a caller's transaction it
    cannot, and leaves it to autovacuum."""
    from django.db import transaction

    ran = []
    real_cursor = connection.cursor

    def cursor():
        wrapped = real_cursor()
        execute = wrapped.execute

        def recording(sql, params=None):
            if sql.startswith("VACUUM"):
                ran.append(sql)
            return execute(sql, params)

        wrapped.execute = recording
        return wrapped

    monkeypatch.setattr(consensus_services, "VACUUM_FROM_ROWS", 2)
    monkeypatch.setattr(connection, "cursor", cursor)
    project = ProjectFactory()
    for i in range(3):
        JudgementFactory(comparison=make_pair(project, prompt=f"p{i}"), choice="a")
    with transaction.atomic():
        consensus_refit(project=project)
    assert ran == []
    consensus_refit(project=project, force=True, warm=False)  # rewrites nothing: same figures
    assert ran == []
    JudgementFactory(comparison=make_pair(project, prompt="p3"), choice="b")
    JudgementFactory(comparison=make_pair(project, prompt="p4"), choice="b")
    consensus_refit(project=project)
    assert ran == ["VACUUM annotation_storedconsensus"]
