"""Eval rounds with a judge: reviewers get a seeded random subset, the judge's job rates every item
in both orders (a real tiny reward model), the round's prediction-powered estimates, the judge's
kappa, the stopping panel's choice of estimate and the decision that records it."""

from __future__ import annotations

import numpy as np
import pytest
from django.urls import reverse

from annotation.agreement import cohen_kappa
from annotation.services.importing import project_get_or_create
from monitoring.models import EvalJudgeVerdict, EvalRound, StopDecision
from monitoring.selectors import eval_rounds as eval_selectors
from monitoring.selectors import round_judges as ppi_selectors
from monitoring.selectors import stopping_panel
from monitoring.services import eval_rounds as eval_services
from monitoring.services.eval_rounds import EvalError
from monitoring.services.judges import judge_create
from monitoring.services.round_judges import (
    RoundAnswer,
    RoundJudgeError,
    round_judge_answers_save,
    round_judge_launch,
)
from monitoring.services.stopping_panel import stopping_panel_refresh
from monitoring.stats.ppi import ppi_mean
from tests.helpers.clients import logged_in
from tests.helpers.eval_rounds import make_round
from tests.helpers.judged_rounds import (
    human_verdict,
    judge_verdict,
    judged_round,
    rate_drawn_items,
    rated_round,
    rm_judge,
    store_verdicts,
)
from training.models import TrainingRun

rm_judge, rated_round = rm_judge, rated_round  # the fixtures, from the shared module

pytestmark = pytest.mark.django_db

OUTCOME = {"a": 1.0, "tie": 0.5, "b": 0.0}


def _drawn(round_: EvalRound) -> list[int]:
    return sorted(round_.items.filter(for_humans=True).values_list("position", flat=True))


def test_reviewers_get_a_seeded_random_subset_with_its_probability(run_with_checkpoints, rm_judge):
    """30 items, half for reviewers (at least 5): 15 drawn, each with probability 15/30; the same
    seed draws the same items, another seed others; the judge's job waits for the answers."""
    run = run_with_checkpoints
    first = judged_round(run, rm_judge, size=30, human_fraction=0.5, min_human_items=5, seed=7)
    again = judged_round(run, rm_judge, size=30, human_fraction=0.5, min_human_items=5, seed=7)
    other = judged_round(run, rm_judge, size=30, human_fraction=0.5, min_human_items=5, seed=8)
    assert len(_drawn(first)) == 15
    assert set(first.items.values_list("inclusion_probability", flat=True)) == {0.5}
    assert _drawn(first) == _drawn(again) != _drawn(other)
    assert first.judge_status == "waiting"


def test_at_least_the_minimum_number_of_items_go_to_reviewers(run_with_checkpoints, rm_judge):
    """10% of 30 items is 3, under the minimum of 20: 20 are drawn, each with probability 2/3."""
    round_ = judged_round(run_with_checkpoints, rm_judge, size=30, human_fraction=0.1)
    assert len(_drawn(round_)) == 20
    assert list(set(round_.items.values_list("inclusion_probability", flat=True))) == [
        pytest.approx(20 / 30)
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"human_fraction": 0.5, "judge": None}, "only a round with a judge"),
        ({"human_fraction": 0.0}, "human_fraction must be in (0, 1]"),
        ({"min_human_items": 1}, "min_human_items must be at least 2"),
        ({"judge": "other"}, "belongs to project 'other'"),
    ],
)
def test_bad_round_settings_are_refused_and_nothing_is_written(
    run_with_checkpoints, rm_judge, kwargs, message
):
    """Each wrong setting is an error that names it; no round is created."""
    if kwargs.get("judge") == "other":
        other, _ = project_get_or_create(slug="other")
        kwargs["judge"] = judge_create(
            project=other, name="rm", kind="reward_model", created_by=None,
            reward_run=rm_judge.reward_run, tie_band=0.0,
        )  # fmt: skip
    run = run_with_checkpoints
    args = {"checkpoint": run.checkpoints.get(step=4), "project": run.snapshot.export.project,
            "size": 10, "created_by": None, "baseline_model": "smollm2-135m-instruct",
            "judge": rm_judge, "enqueue": False}  # fmt: skip
    with pytest.raises(EvalError, match=message.replace("(", r"\(").replace(")", r"\)")):
        eval_services.round_create(**{**args, **kwargs})
    assert not EvalRound.objects.exists()


def test_reviewers_are_served_only_the_drawn_items_and_the_round_closes_on_them(
    run_with_checkpoints, rm_judge, reviewers
):
    """6 of 30 items drawn, one reviewer per item: the open-rounds list asks for 6 ratings and says
    24 items are the judge's alone; the reviewer is handed exactly the 6 drawn items, and the round
    closes after the sixth rating."""
    round_ = judged_round(
        run_with_checkpoints, rm_judge, size=30, human_fraction=0.2, min_human_items=6,
        reviewers_per_item=1,
    )  # fmt: skip
    row = next(r for r in eval_selectors.rounds_open_for(reviewers[0].pk) if r["round"] == round_)
    assert (row["needed"], row["judge_only"], row["identical"]) == (6, 24, 0)
    drawn = _drawn(round_)
    rated = rate_drawn_items(round_, reviewers[0], {p: ("a", 4) for p in drawn})
    assert rated == 6
    rated_positions = sorted(
        round_.items.filter(assignments__judgement__isnull=False).values_list("position", flat=True)
    )
    assert rated_positions == drawn
    round_.refresh_from_db()
    assert round_.status == "closed"


def test_the_judge_task_rates_every_item_in_both_orders_with_a_tiny_reward_model(
    run_with_checkpoints, rm_judge
):
    """The judge_round task with a real tiny reward model: 2 answers per item (checkpoint first,
    baseline first), the same score difference r(checkpoint) - r(baseline) in both orders and the
    verdict its sign (tie band 0); progress 20 / 20; a second message finds nothing to do."""
    from monitoring.tasks import judge_round

    round_ = judged_round(run_with_checkpoints, rm_judge, size=10)
    round_ = round_judge_launch(round_=round_)
    assert round_.judge_status == "queued"
    assert judge_round(round_.pk) == "succeeded"
    round_.refresh_from_db()
    assert (round_.judge_done, round_.judge_total) == (20, 20)
    verdicts = EvalJudgeVerdict.objects.filter(item__round=round_)
    assert verdicts.count() == 20
    for item in round_.items.all():
        mine = {v.shown_first: v for v in verdicts.filter(item=item)}
        assert set(mine) == {"checkpoint", "baseline"}
        diff = mine["checkpoint"].score_diff
        assert mine["baseline"].score_diff == pytest.approx(diff, abs=1e-5)
        assert mine["checkpoint"].preference == ("a" if diff > 0 else "b" if diff < 0 else "tie")
        assert '"score_a"' in mine["checkpoint"].raw
    before = list(verdicts.values_list("pk", flat=True))
    assert judge_round(round_.pk) == "succeeded"  # redelivered: not queued, left alone
    assert list(verdicts.values_list("pk", flat=True)) == before


def test_a_relaunched_job_answers_only_what_is_missing(run_with_checkpoints, rm_judge):
    """A job that failed after some answers: relaunched, it answers the 4 missing ones and keeps
    the 16 it had (same rows)."""
    from monitoring.tasks import judge_round

    round_ = round_judge_launch(round_=judged_round(run_with_checkpoints, rm_judge, size=10))
    judge_round(round_.pk)
    verdicts = EvalJudgeVerdict.objects.filter(item__round=round_)
    lost = verdicts.filter(shown_first="baseline", item__position__lt=4)
    assert lost.count() == 4
    lost.delete()
    kept = set(verdicts.values_list("pk", flat=True))
    EvalRound.objects.filter(pk=round_.pk).update(judge_status="failed", judge_error="killed")
    round_.refresh_from_db()
    round_judge_launch(round_=round_)
    assert judge_round(round_.pk) == "succeeded"
    assert verdicts.count() == 20 and kept <= set(verdicts.values_list("pk", flat=True))


def test_the_job_cannot_start_before_the_answers_or_without_a_judge(run_with_checkpoints, rm_judge):
    """Still generating: refused, saying why; a round without a judge: refused."""
    run = run_with_checkpoints
    generating = eval_services.round_create(
        checkpoint=run.checkpoints.get(step=4), project=run.snapshot.export.project, size=4,
        created_by=None, baseline_model="smollm2-135m-instruct", judge=rm_judge, enqueue=False,
    )  # fmt: skip
    with pytest.raises(RoundJudgeError, match="generating responses"):
        round_judge_launch(round_=generating)
    plain = eval_services.round_create(
        checkpoint=run.checkpoints.get(step=4), project=run.snapshot.export.project, size=4,
        created_by=None, baseline_model="smollm2-135m-instruct", enqueue=False,
    )  # fmt: skip
    with pytest.raises(RoundJudgeError, match="has no judge"):
        round_judge_launch(round_=plain)


def test_stored_answers_are_checked_and_a_bad_one_writes_nothing(
    run_with_checkpoints, rm_judge, open_round
):
    """An answer about another round's item, or a usefulness of 7: an error, no row written."""
    round_ = judged_round(run_with_checkpoints, rm_judge, size=4)
    mine = round_.items.first().pk
    foreign = open_round.items.first().pk
    good = RoundAnswer(item_id=mine, shown_first="checkpoint", raw="[[A]]", preference="a")
    for bad, message in (
        (RoundAnswer(item_id=foreign, shown_first="checkpoint", raw="", preference="a"), "not an"),
        (RoundAnswer(item_id=mine, shown_first="baseline", raw="", preference="a", usefulness=7),
         "usefulness must be from 1 to 5"),
    ):  # fmt: skip
        with pytest.raises(RoundJudgeError, match=message):
            round_judge_answers_save(round_=round_, answers=[good, bad])
    assert not EvalJudgeVerdict.objects.exists()


# --- Estimates ---------------------------------------------------------------------------------


def test_round_ppi_is_ppi_mean_on_the_rounds_items(rated_round):
    """Win rate and usefulness are ppi_mean on the per-item arrays (judge on all 30, reviewers on
    the 24 drawn, probability 0.8 each), with the judge's effective ratings shown."""
    drawn = set(_drawn(rated_round))
    judge = np.array([OUTCOME[judge_verdict(p)[0]] for p in range(30)])
    human = np.array([OUTCOME[human_verdict(p)[0]] if p in drawn else np.nan for p in range(30)])
    expected = ppi_mean(judge, human, inclusion_probability=0.8, bounds=(0, 1))
    got = ppi_selectors.round_ppi(rated_round)
    assert got["win_rate"].ppi.estimate == pytest.approx(expected.ppi.estimate)
    assert got["win_rate"].ppi.low == pytest.approx(expected.ppi.low)
    assert got["win_rate"].classical.high == pytest.approx(expected.classical.high)
    assert got["win_rate"].ppi.n == 24 and got["n_rated_items"] == 24
    assert got["win_rate"].effective_n > 24  # the judge correlates: worth more than 24 ratings
    judge_useful = np.array([judge_verdict(p)[1] for p in range(30)])
    human_useful = np.array([human_verdict(p)[1] if p in drawn else np.nan for p in range(30)])
    useful = ppi_mean(judge_useful, human_useful, inclusion_probability=0.8, bounds=(1, 5))
    assert got["usefulness"].ppi.estimate == pytest.approx(useful.ppi.estimate)


def test_the_judges_kappa_is_measured_on_the_items_both_rated(rated_round):
    """Each rating against the judge's verdict on its item: Cohen's kappa on the 24 drawn items;
    no swap flips (both orders alike)."""
    drawn = _drawn(rated_round)
    expected = cohen_kappa(
        [human_verdict(p)[0] for p in drawn], [judge_verdict(p)[0] for p in drawn]
    )
    agreement = ppi_selectors.round_judge_agreement(rated_round)
    assert agreement["kappa"] == pytest.approx(expected)
    assert 0.5 < expected < 0.95
    assert (agreement["overlap_items"], agreement["pairs"], agreement["swap_flips"]) == (24, 24, 0)


def test_the_panel_uses_ppi_when_the_kappa_reaches_the_threshold_and_says_so(
    run_with_checkpoints, rated_round
):
    """Kappa ~0.8 on 24 shared items: with the threshold 0.5 the panel's usefulness criterion runs
    on the prediction-powered interval and says so; with 0.95 on the human-only one, saying the
    kappa is below the threshold."""
    kappa = ppi_selectors.round_judge_agreement(rated_round)["kappa"]
    trusting = stopping_panel.run_stopping_panel(
        run_with_checkpoints, n_boot=50, kappa_threshold=0.5
    )
    ppi = ppi_selectors.round_ppi(rated_round)
    choice = trusting["estimates"]["usefulness"]
    assert choice.source == "ppi" and choice.interval == ppi["usefulness"].ppi
    assert choice.reason.startswith("Prediction-powered estimate")
    assert f"kappa with the reviewers is {kappa:.2f} on 24 shared items" in choice.reason
    criterion = trusting["panel"].criteria[1]
    assert criterion.value == pytest.approx(ppi["usefulness"].ppi.estimate)
    assert criterion.detail.startswith("prediction-powered")
    assert trusting["estimates"]["win_rate"].source == "ppi"

    strict = stopping_panel.run_stopping_panel(
        run_with_checkpoints, n_boot=50, kappa_threshold=0.95
    )
    choice = strict["estimates"]["usefulness"]
    assert choice.source == "human" and choice.interval == ppi["usefulness"].classical
    assert "below your threshold 0.95" in choice.reason
    assert strict["panel"].criteria[1].detail.startswith("human-only")


def test_a_round_without_a_judge_says_the_panel_used_the_humans(open_round, reviewers):
    """No judge: both estimates human-only, the reason says the round has no judge, and the
    usefulness criterion keeps its bootstrap interval."""
    rate_drawn_items(open_round, reviewers[0], {p: ("a", 5) for p in range(4)})
    panel = stopping_panel.run_stopping_panel(open_round.checkpoint.run, n_boot=50)
    for key in ("usefulness", "win_rate"):
        assert panel["estimates"][key].source == "human"
        assert panel["estimates"][key].reason.endswith("this round has no judge.")
    assert panel["panel"].criteria[1].value == pytest.approx(5.0)


def test_a_decision_records_the_estimate_it_rested_on(run_with_checkpoints, rated_round, reviewers):
    """A decision on the round with threshold 0.5 keeps source "ppi" and the usefulness interval;
    a kappa threshold outside [-1, 1] is refused and writes nothing."""
    with pytest.raises(EvalError, match="kappa_threshold"):
        eval_services.decision_record(
            run=run_with_checkpoints, decision="continue", reviewer=reviewers[0],
            round_=rated_round, kappa_threshold=1.5,
        )  # fmt: skip
    assert not StopDecision.objects.exists()
    made = eval_services.decision_record(
        run=run_with_checkpoints, decision="continue", reviewer=reviewers[0], round_=rated_round,
        kappa_threshold=0.5,
    )  # fmt: skip
    ppi = ppi_selectors.round_ppi(rated_round)["usefulness"].ppi
    assert made.estimate_source == "ppi"
    assert made.estimate["kappa_threshold"] == 0.5 and made.estimate["round"] == rated_round.pk
    assert made.estimate["usefulness"]["low"] == pytest.approx(ppi.low)
    assert made.estimate["usefulness"]["source"] == "ppi"
    assert made.estimate["win_rate"]["reason"].startswith("Prediction-powered")


def test_a_judge_without_usefulness_ratings_leaves_usefulness_to_the_humans(
    run_with_checkpoints, rm_judge, reviewers
):
    """A reward-model judge gives verdicts only: the win rate gets its PPI interval, usefulness
    says why it has none, and the panel uses the humans' usefulness saying so."""
    round_ = judged_round(run_with_checkpoints, rm_judge, size=30, reviewers_per_item=1)
    store_verdicts(round_, {p: (judge_verdict(p)[0], None) for p in range(30)})
    rate_drawn_items(round_, reviewers[0], {p: human_verdict(p) for p in range(30)})
    ppi = ppi_selectors.round_ppi(round_)
    assert ppi["win_rate"] is not None and ppi["usefulness"] is None
    assert "no usefulness ratings" in ppi["usefulness_note"]
    panel = stopping_panel.run_stopping_panel(run_with_checkpoints, n_boot=50, kappa_threshold=0.5)
    choice = panel["estimates"]["usefulness"]
    assert choice.source == "human" and "no usefulness ratings" in choice.reason


# --- The job from generation, a generative judge, the pages ------------------------------------


def test_generation_launches_the_judge_on_its_queue(
    run_with_checkpoints, rm_judge, django_capture_on_commit_callbacks, settings, monkeypatch
):
    """Once the answers are generated the round opens and its judge's job is queued: judge_round
    on the gpu queue (a reward model runs locally), sent after commit."""
    from monitoring.services import round_judges as round_judge_services
    from monitoring.tasks import generate_round_responses

    round_ = make_round(run_with_checkpoints, judge=rm_judge)
    sent = []
    real = round_judge_services.task_send

    def spy(name, **kwargs):
        sent.append((name, kwargs.get("queue")))
        return real(name, **kwargs)

    monkeypatch.setattr(round_judge_services, "task_send", spy)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert generate_round_responses.apply(args=[round_.pk]).get() == "open"
    round_.refresh_from_db()
    assert round_.judge_status == "queued" and len(callbacks) == 1
    assert sent == [("monitoring.tasks.judge_round", settings.CONCORD_GPU_QUEUE)]


def test_a_generative_judge_keeps_unreadable_answers_as_such(run_with_checkpoints, reviewers):
    """A local LLM judge (the tiny untrained Llama under the registry name) asked for usefulness:
    its babble is no verdict, so every answer is stored with its raw text and the parse error, the
    job still succeeds, and the win rate's judge carries no information: PPI gives lam 0 and the
    human-only interval."""
    from monitoring.stats.judging import DEFAULT_USEFULNESS_TEMPLATE
    from monitoring.tasks import judge_round

    project = run_with_checkpoints.snapshot.export.project
    judge = judge_create(
        project=project, name="llm", kind="local_llm", created_by=None,
        model_name="smollm2-135m-instruct", template=DEFAULT_USEFULNESS_TEMPLATE,
        max_new_tokens=6,
    )  # fmt: skip
    round_ = judged_round(run_with_checkpoints, judge, size=4, reviewers_per_item=1)
    round_judge_launch(round_=round_)
    assert judge_round(round_.pk) == "succeeded"
    verdicts = EvalJudgeVerdict.objects.filter(item__round=round_)
    assert verdicts.count() == 8
    assert not verdicts.exclude(preference="").exists()
    assert all(v.parse_error and v.raw is not None for v in verdicts)
    rate_drawn_items(round_, reviewers[0], {p: human_verdict(p) for p in range(4)})
    win_rate = ppi_selectors.round_ppi(round_)["win_rate"]
    assert win_rate.lam == 0.0 and win_rate.ppi == win_rate.classical
    agreement = ppi_selectors.round_judge_agreement(round_)
    assert agreement["unparsed"] == 8 and agreement["overlap_items"] == 0


def test_the_round_form_takes_a_judge_and_a_share_for_reviewers(rm_judge, reviewers):
    """The new-round form creates a round with the judge and half of 30 items for reviewers (at
    least 20: 20 drawn)."""
    run = rm_judge.reward_run
    policy = TrainingRun.objects.exclude(kind="rm").get()
    client = logged_in(reviewers[0])
    response = client.post(
        reverse("monitoring:eval-rounds"),
        {"checkpoint": policy.checkpoints.get(step=4).pk, "project": run.snapshot.export.project.slug,
         "baseline_model": "smollm2-135m-instruct", "size": 30, "ci_width": 0.2,
         "max_new_tokens": 16, "judge": rm_judge.pk, "human_fraction": 0.5},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    round_ = EvalRound.objects.get()
    assert round_.judge == rm_judge and round_.human_fraction == 0.5
    assert round_.items.filter(for_humans=True).count() == 20


def test_the_round_page_relaunches_a_failed_judge_and_the_panel_refuses_a_bad_kappa(
    rated_round, reviewers, django_capture_on_commit_callbacks
):
    """A failed job shows its error and a button that queues it again; the progress the page polls
    says so. On the run page a kappa threshold outside [-1, 1] is an error on the page and the
    default 0.7 is used."""
    EvalRound.objects.filter(pk=rated_round.pk).update(judge_status="failed", judge_error="OOM")
    client = logged_in(reviewers[0])
    url = reverse("monitoring:eval-round", args=[rated_round.pk])
    page = client.get(url).content.decode()
    assert "OOM" in page and "Run the judge on what is missing" in page
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert client.post(url, {"action": "judge"}).status_code == 302
    rated_round.refresh_from_db()
    assert rated_round.judge_status == "queued" and len(callbacks) == 1
    progress = client.get(reverse("monitoring:eval-progress", args=[rated_round.pk])).json()
    assert progress["judge"] == {"status": "queued", "label": "Queued", "done": 60, "total": 60}

    run_url = reverse("monitoring:run-detail", args=[rated_round.checkpoint.run_id])
    stopping_panel_refresh(run=rated_round.checkpoint.run)
    page = client.get(run_url, {"kappa": "3"}).content.decode()
    assert "Ensure this value is less than or equal to 1" in page
    assert "at or above your threshold 0.70" in page
