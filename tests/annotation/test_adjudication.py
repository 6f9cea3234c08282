"""Adjudication: the queue's rules, verdicts kept apart from judgements with their history, flags,
exports with --consensus adjudicated, annotators' accuracy against verdicts, guidelines versions."""

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from annotation.models import Adjudication, Assignment, Flag, GuidelinesVersion, Judgement
from annotation.selectors.adjudication import (
    adjudicated_choices,
    adjudication_for,
    adjudication_history,
    adjudication_queue,
    annotator_adjudicated_accuracy,
    headline_by_version,
    judgements_per_version,
)
from annotation.services import labelling
from annotation.services.adjudication import (
    AdjudicationError,
    adjudication_record,
    flag_create,
    guidelines_diff,
    guidelines_notice_take,
    guidelines_update,
)
from annotation.services.exporting import dataset_export
from tests.factories import ComparisonFactory, JudgementFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def people():
    return [UserFactory(username=f"ann{i}", role="Annotator") for i in range(3)]


@pytest.fixture
def lead():
    return UserFactory(username="lead", role="ML engineer")


def _judged(project, people, choices, **extra):
    """A comparison of ``project`` judged by people[i] with choices[i]."""
    comparison = ComparisonFactory(project=project, **extra)
    for who, choice in zip(people, choices, strict=False):
        JudgementFactory(comparison=comparison, annotator=who, choice=choice)
    return comparison


def _queue(project, threshold=0.0):
    return {
        e.comparison_id: e.reasons for e in adjudication_queue(project=project, threshold=threshold)
    }


def test_queue_holds_splits_gold_disagreements_and_flags_only(people):
    """overlap 2: a/b is split; a/a is agreed (not queued); a gold "b" item judged a/a is a gold
    disagreement; a single vote a (incomplete) is not split; a flagged unjudged pair is queued."""
    project = ProjectFactory(overlap=2)
    split = _judged(project, people, ["a", "b"])
    agreed = _judged(project, people, ["a", "a"])
    gold = _judged(project, people, ["a", "a"], gold="b")
    incomplete = _judged(project, people, ["a"])
    flagged = ComparisonFactory(project=project)
    assignment = Assignment.objects.create(
        comparison=flagged, annotator=people[0], shown_left="a",
        expires_at=timezone.now() + timedelta(minutes=30),
    )  # fmt: skip
    flag_create(annotator=people[0], assignment_id=assignment.pk, reason="unclear", note="typo?")
    queue = _queue(project)
    assert queue == {split.pk: ("split",), gold.pk: ("gold",), flagged.pk: ("flagged",)}
    assert agreed.pk not in queue and incomplete.pk not in queue


def test_dawid_skene_threshold_queues_uncertain_comparisons(people):
    """With threshold 1 every complete comparison's posterior (< 1) is under it; with 0 none is."""
    project = ProjectFactory(overlap=3)
    agreed = _judged(project, people, ["a", "a", "b"])
    assert "uncertain" in _queue(project, threshold=1.0)[agreed.pk]
    assert agreed.pk not in _queue(project, threshold=0.0)
    with pytest.raises(ValueError, match="threshold"):
        adjudication_queue(project=project, threshold=1.5)


def test_adjudication_never_changes_a_judgement(people, lead):
    """Recording a verdict leaves every judgement's row exactly as it was; the pair leaves the queue."""
    project = ProjectFactory(overlap=2)
    split = _judged(project, people, ["a", "b"])
    before = list(Judgement.objects.order_by("pk").values())
    adjudication = adjudication_record(
        comparison=split, decided_by=lead, pick="left", shown_left="b", note="b follows the brief",
        reasons=["split"],
    )  # fmt: skip
    assert adjudication.choice == "b"  # left with b shown on the left: b (common.sides)
    assert list(Judgement.objects.order_by("pk").values()) == before
    assert split.pk not in _queue(project)
    assert adjudicated_choices(project=project) == {split.pk: "b"}


def test_re_adjudication_supersedes_and_keeps_the_history(people, lead):
    """A second verdict is current; the first is stamped superseded, pointed at, and kept."""
    project = ProjectFactory(overlap=2)
    split = _judged(project, people, ["a", "b"])
    other = UserFactory(username="adj", role="Adjudicator")
    first = adjudication_record(comparison=split, decided_by=lead, pick="left", shown_left="a")
    second = adjudication_record(
        comparison=split, decided_by=other, pick="right", shown_left="a", note="on second reading"
    )
    first.refresh_from_db()
    assert adjudication_for(split) == second
    assert (second.choice, second.supersedes, second.decided_by) == ("b", first, other)
    assert first.superseded_at is not None and first.choice == "a"
    assert adjudication_history(split) == [second, first]
    assert Adjudication.objects.filter(comparison=split).count() == 2


def test_bad_verdict_is_refused_and_nothing_written(people, lead):
    """A tie where the project offers none, an unknown pick or side: an error, no row."""
    project = ProjectFactory(overlap=2, allow_ties=False)
    split = _judged(project, people, ["a", "b"])
    for pick, side in [("tie", "a"), ("middle", "a"), ("left", "x")]:
        with pytest.raises(AdjudicationError):
            adjudication_record(comparison=split, decided_by=lead, pick=pick, shown_left=side)
    assert not Adjudication.objects.exists()


def test_a_flag_after_the_verdict_brings_the_pair_back(people, lead):
    """Flagged, decided (leaves the queue), flagged again later: back in the queue."""
    project = ProjectFactory(overlap=3)
    comparison = ComparisonFactory(project=project)
    assignment = Assignment.objects.create(
        comparison=comparison, annotator=people[1], shown_left="b",
        expires_at=timezone.now() + timedelta(minutes=30),
    )  # fmt: skip
    flag_create(annotator=people[1], assignment_id=assignment.pk, reason="broken")
    adjudication_record(comparison=comparison, decided_by=lead, pick="left", shown_left="b")
    assert comparison.pk not in _queue(project)
    flag_create(annotator=people[1], assignment_id=assignment.pk, reason="harmful", note="slur")
    assert _queue(project)[comparison.pk] == ("flagged",)
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.ACTIVE  # the annotator keeps the pair


def test_flag_refuses_another_annotators_assignment_and_unknown_reasons(people):
    project = ProjectFactory()
    assignment = Assignment.objects.create(
        comparison=ComparisonFactory(project=project), annotator=people[0], shown_left="a",
        expires_at=timezone.now() + timedelta(minutes=30),
    )  # fmt: skip
    with pytest.raises(AdjudicationError, match="not assigned"):
        flag_create(annotator=people[1], assignment_id=assignment.pk, reason="unclear")
    with pytest.raises(AdjudicationError, match="unknown flag reason"):
        flag_create(annotator=people[0], assignment_id=assignment.pk, reason="boring")
    assert not Flag.objects.exists()


def test_export_with_consensus_adjudicated(people, lead, tmp_path, settings):
    """The adjudicated pair takes the verdict (its row says "adjudicated"), the others the majority;
    the manifest counts the pairs from adjudication and the judgements per guidelines version."""
    settings.EXPORT_DIR = tmp_path
    project = ProjectFactory(overlap=3)
    decided = _judged(project, people, ["a", "a", "b"])
    plain = _judged(project, people, ["b", "b", "a"])
    adjudication_record(comparison=decided, decided_by=lead, pick="right", shown_left="a")
    export = dataset_export(project=project, consensus="adjudicated")
    rows = {
        r["comparison_id"]: r
        for r in map(json.loads, (tmp_path / project.slug / export.sha256 / "pairs.jsonl").open())
    }
    assert (rows[decided.pk]["chosen_side"], rows[decided.pk]["consensus"]) == ("b", "adjudicated")
    # b chosen by 1 of 3 at strength 1 against 2 for a: agreement 1/3, margin (1 - 2) / (3 * 3).
    assert rows[decided.pk]["agreement"] == pytest.approx(1 / 3, abs=1e-6)
    assert rows[decided.pk]["margin"] == pytest.approx(-1 / 9, abs=1e-6)
    assert (rows[plain.pk]["chosen_side"], rows[plain.pk]["consensus"]) == ("b", "majority")
    manifest = json.loads((tmp_path / project.slug / export.sha256 / "manifest.json").read_text())
    assert manifest["pairs_adjudicated"] == 1
    assert manifest["options"] == {
        "keep_ties": False, "min_judgements": 1, "consensus": "adjudicated",
        "fallback": "majority", "pairs_adjudicated": 1,
    }  # fmt: skip
    assert manifest["guidelines_versions"] == {"unversioned": 6}
    with pytest.raises(ValueError, match="fallback"):
        dataset_export(project=project, consensus="adjudicated", fallback="coin")


def test_export_command_adjudicated_with_dawid_skene_fallback(
    people, lead, tmp_path, settings, capsys
):
    """No verdict yet: the pair takes the Dawid-Skene fallback; the command says 0 from adjudication."""
    settings.EXPORT_DIR = tmp_path / "store"
    project = ProjectFactory(overlap=3)
    _judged(project, people, ["a", "a", "b"])
    out = tmp_path / "pairs.jsonl"
    call_command(
        "export_dataset", "--project", project.slug, "--consensus", "adjudicated",
        "--fallback", "dawid_skene", "--out", str(out),
    )  # fmt: skip
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert (row["consensus"], row["chosen_side"]) == ("dawid_skene", "a")
    assert "0 from adjudication)" in capsys.readouterr().out


def test_annotator_accuracy_against_adjudicated_items(people, lead):
    """ann0 matches both verdicts, ann1 one of two, ann2 none of one."""
    project = ProjectFactory(overlap=2)
    first = _judged(project, people[:2], ["a", "b"])
    second = _judged(project, [people[0], people[1], people[2]], ["b", "b", "a"])
    adjudication_record(comparison=first, decided_by=lead, pick="left", shown_left="a")
    adjudication_record(comparison=second, decided_by=lead, pick="right", shown_left="a")
    assert annotator_adjudicated_accuracy(project=project) == {
        "ann0": {"n": 2, "accuracy": 1.0},
        "ann1": {"n": 2, "accuracy": 0.5},
        "ann2": {"n": 1, "accuracy": 0.0},
    }


def test_guidelines_update_numbers_versions_and_stamps_new_judgements(people, lead):
    """The first edit keeps the old text as v1 and makes v2; unchanged text makes nothing; a
    judgement submitted afterwards is stamped v2, older ones stay unversioned (null)."""
    project = ProjectFactory(overlap=3, guidelines="Prefer the helpful answer.")
    old = _judged(project, people[:1], ["a"])
    version = guidelines_update(
        project=project, text="Prefer the helpful answer.\nPenalise made-up facts.", user=lead
    )
    assert (version.number, version.author) == (2, lead)
    assert list(GuidelinesVersion.objects.values_list("number", "author")) == [
        (1, None),
        (2, lead.pk),
    ]
    assert guidelines_update(project=project, text=project.guidelines, user=lead) is None
    project.refresh_from_db()
    assert project.guidelines.endswith("made-up facts.")
    comparison = ComparisonFactory(project=project)
    assignment = Assignment.objects.create(
        comparison=comparison, annotator=people[1], shown_left="a",
        expires_at=timezone.now() + timedelta(minutes=30),
    )  # fmt: skip
    judgement = labelling.judgement_submit(
        annotator=people[1], assignment_id=assignment.pk,
        verdict=labelling.Verdict(pick="left", strength=1),
    )  # fmt: skip
    assert judgement.guidelines_version == version
    assert Judgement.objects.get(comparison=old).guidelines_version is None
    assert judgements_per_version(project=project) == {"unversioned": 1, "v2": 1}
    assert headline_by_version(project=project, number=2)["n_judgements"] == 1


def test_headline_by_version_counts_only_that_versions_judgements(people, lead):
    """Unversioned: two comparisons judged a/a and a/b by two people: percent agreement 1/2."""
    project = ProjectFactory(overlap=2)
    _judged(project, people[:2], ["a", "a"])
    _judged(project, people[:2], ["a", "b"])
    figures = headline_by_version(project=project, number=None)
    assert (figures["n_judgements"], figures["n_items"]) == (4, 2)
    assert figures["percent_agreement"] == pytest.approx(0.5)
    assert headline_by_version(project=project, number=1)["n_judgements"] == 0


def test_guidelines_changed_notice_shows_once_with_the_diff(people, lead):
    """An annotator who judged before v2 sees the notice once; a newcomer never does."""
    project = ProjectFactory(guidelines="Be kind.")
    _judged(project, people[:1], ["a"])
    guidelines_update(project=project, text="Be kind.\nBe brief.", user=lead)
    notice = guidelines_notice_take(project=project, annotator=people[0])
    assert notice.number == 2
    assert [(line.kind, line.text) for line in notice.diff] == [
        ("same", "Be kind."),
        ("added", "Be brief."),
    ]
    assert guidelines_notice_take(project=project, annotator=people[0]) is None
    assert guidelines_notice_take(project=project, annotator=people[2]) is None
    guidelines_update(project=project, text="Be brief.", user=lead)
    later = guidelines_notice_take(project=project, annotator=people[2])
    assert [(line.kind, line.text) for line in later.diff] == [
        ("removed", "Be kind."),
        ("same", "Be brief."),
    ]


def test_guidelines_diff_keeps_markup_as_text():
    """The diff carries the raw lines; the template escapes them (no HTML is built here)."""
    assert guidelines_diff("", "<script>x</script>")[0].text == "<script>x</script>"
