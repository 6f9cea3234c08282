"""Items whose two answers are identical: never handed to a reviewer, counted as ties in the win rate
(each once: the statistics take item means, so it weighs as much as a fully rated item), left out
of the progress counts
and of the auto-close rule; a round whose answers are all identical closes as soon as it opens."""

import pytest

from monitoring.models import EvalItem, EvalJudgement, EvalRound
from monitoring.selectors import eval_rounds as eval_selectors
from monitoring.selectors.eval_rounds import answers_identical
from monitoring.services import eval_rounds as eval_services
from tests.helpers.eval_rounds import TINY_SAMPLING, make_round
from tests.helpers.tiny_models import tiny_llama
from training.models import Checkpoint

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ("Paris.", "Paris.", True),
        ("Paris.\n", "  Paris.", True),  # PostgreSQL's TRIM would keep the newline
        ("The capital\n\nis  Paris.", "The capital is\tParis.", True),
        ("", " \n\t ", True),  # two empty answers
        ("Paris.", "paris.", False),
        ("Paris", "Par is", False),
        ("Paris.", "", False),
    ],
)
def test_answers_are_identical_when_only_whitespace_differs(first, second, same):
    """Runs of spaces, tabs and newlines count as one space and the ends are stripped; case and
    every other character count."""
    assert answers_identical(first, second) is same


def _make_identical(round_, positions) -> set[int]:
    """Give the items at ``positions`` a baseline answer equal to the checkpoint's but for spacing."""
    ids = set()
    for item in round_.items.filter(position__in=positions):
        EvalItem.objects.filter(pk=item.pk).update(
            baseline_text=f"  **CKPT**\n answer {item.position}\n"
        )
        ids.add(item.pk)
    return ids


def test_identical_items_are_never_shown_and_count_as_ties(open_round, reviewers):
    """Items 0 and 2 of 4 have identical answers. Three reviewers (3 per item) each get items 1 and
    3 only: 6 ratings, all checkpoint wins, and the last one closes the round. The win rate takes
    item means, one tie per identical item: (0.5 + 1 + 0.5 + 1) / 4 = 0.75 on n = 4 items;
    usefulness sees the 6 ratings, the e-process the 2 rated items."""
    identical = _make_identical(open_round, [0, 2])
    assert eval_selectors.identical_item_ids(open_round) == identical
    assert set(eval_selectors.rateable_items(open_round).values_list("position", flat=True)) == {
        1,
        3,
    }
    [row] = eval_selectors.rounds_open_for(reviewers[0].pk)
    assert (row["needed"], row["done"], row["mine"], row["left"], row["identical"]) == (
        6,
        0,
        0,
        2,
        2,
    )

    shown = []
    for reviewer in reviewers[:3]:
        while assignment := eval_services.eval_claim_next(reviewer=reviewer, round_=open_round):
            shown.append(assignment.item.position)
            open_round.refresh_from_db()
            assert open_round.status == "open"  # not before the last rating
            side = "left" if assignment.shown_left == "checkpoint" else "right"
            eval_services.eval_submit(
                assignment=assignment, reviewer=reviewer, pick=side, usefulness=4
            )
            if reviewer == reviewers[0] and len(shown) == 1:
                [row] = eval_selectors.rounds_open_for(reviewers[0].pk)
                assert (row["done"], row["mine"], row["left"]) == (1, 1, 1)
    assert sorted(shown) == [1, 1, 1, 3, 3, 3]
    open_round.refresh_from_db()
    assert open_round.status == "closed"

    results = eval_selectors.round_results(open_round, n_boot=50)
    assert (results["n_identical"], results["n_rated_items"], results["n_judgements"]) == (2, 2, 6)
    assert results["win_rate"].n == 4
    assert results["win_rate"].estimate == pytest.approx(0.75)
    assert [row["identical"] for row in results["items"]] == [True, False, True, False]
    assert results["usefulness"].mean.n == 6
    assert results["eprocess"].wealth.size == 2
    # A point after each rating; the two ties count from the first: (0.5 + 0.5 + 1) / 3 after the
    # first reviewer's first item, (0.5 + 0.5 + 1 + 1) / 4 once their second is rated.
    over_time = eval_selectors.round_win_rate_over_time(open_round)
    assert [p["n"] for p in over_time] == [1, 2, 3, 4, 5, 6]
    assert [round(p["estimate"], 3) for p in over_time] == [0.667] + [0.75] * 5
    counted = eval_selectors.round_outcomes(open_round)
    assert counted.outcomes == [0.5] * 2 + [1.0] * 6
    assert (counted.n_identical, counted.n_ratings, counted.n_rated_items) == (2, 6, 2)


def test_an_identical_item_is_one_tie_whatever_the_reviewers_per_item(open_round, reviewers):
    """With one reviewer per item, as with three, an identical item is one tie: item 0 identical,
    items 1-3 won by the checkpoint: (0.5 + 3) / 4 = 0.875 on 4 items."""
    EvalRound.objects.filter(pk=open_round.pk).update(reviewers_per_item=1)
    open_round.refresh_from_db()
    _make_identical(open_round, [0])
    while assignment := eval_services.eval_claim_next(reviewer=reviewers[0], round_=open_round):
        side = "left" if assignment.shown_left == "checkpoint" else "right"
        eval_services.eval_submit(
            assignment=assignment, reviewer=reviewers[0], pick=side, usefulness=4
        )
    results = eval_selectors.round_results(open_round, n_boot=50)
    assert results["win_rate"].n == 4 and results["win_rate"].estimate == pytest.approx(0.875)
    open_round.refresh_from_db()
    assert open_round.status == "closed"


def test_before_generation_no_item_counts_as_identical(run_with_checkpoints):
    """A round still generating has empty answers on both sides: they are not identical answers
    yet, so nothing is counted as a tie and every item is rateable."""
    round_ = make_round(run_with_checkpoints)
    assert round_.status == "generating"
    assert eval_selectors.identical_item_ids(round_) == set()
    assert eval_selectors.rateable_items(round_).count() == 4
    assert eval_selectors.round_outcomes(round_).outcomes == []


def test_a_round_whose_answers_are_all_identical_closes_when_generated(
    run_with_checkpoints, reviewers, tmp_path, tiny_tokenizer_dir
):
    """The baseline checkpoint has the same weights as the checkpoint under test (seed 2 both), so
    at the same sampling seed both write the same (non-empty) answers: the round closes itself at
    the end of generation, nobody is handed an item, and there is no human win rate (identical
    answers alone are no human judgement)."""
    run = run_with_checkpoints
    twin = Checkpoint.objects.create(
        run=run, step=1, metrics={},
        path=str(tiny_llama(tmp_path / "ckpt-twin", tiny_tokenizer_dir, seed=2)),
    )  # fmt: skip
    round_ = make_round(run, baseline_checkpoint=twin, baseline_model="", sampling=TINY_SAMPLING)
    from monitoring.tasks import generate_round_responses

    assert generate_round_responses.apply(args=[round_.pk]).get() == "closed"
    items = list(round_.items.all())
    assert all(i.checkpoint_text.strip() and i.checkpoint_text == i.baseline_text for i in items)
    round_.refresh_from_db()
    assert eval_services.eval_claim_next(reviewer=reviewers[0], round_=round_) is None
    results = eval_selectors.round_results(round_, n_boot=50)
    assert results["n_identical"] == 4 and results["n_judgements"] == 0
    assert results["win_rate"] is None and results["over_time"] == []
    assert not EvalJudgement.objects.exists()


def test_a_closed_round_takes_no_more_ratings(open_round, reviewers):
    """A rating on an assignment handed out before the round was closed by hand is refused and
    nothing is stored."""
    assignment = eval_services.eval_claim_next(reviewer=reviewers[0], round_=open_round)
    eval_services.round_close(round_=open_round)
    with pytest.raises(eval_services.EvalError, match="closed"):
        eval_services.eval_submit(
            assignment=assignment, reviewer=reviewers[0], pick="tie", usefulness=3
        )
    assert not EvalJudgement.objects.exists()
