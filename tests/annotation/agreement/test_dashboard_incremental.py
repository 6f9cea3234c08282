"""The agreement dashboard's incremental refresh (issue 30): the last refresh's rows patched with
the judgements added or edited since give the full recomputation's figures exactly (same bootstrap
seeds), and whatever the watermark cannot see (a deletion, an edit without its time, a comparison,
prompt or response changed, a lost or foreign file) falls back to a full read."""

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from annotation.models import Comparison, Judgement, Project, Prompt, RepeatJudgement, Response
from annotation.selectors.agreement import judgements_fingerprint, project_rows
from annotation.selectors.agreement_changes import rows_checksum, table_checksums
from annotation.services import agreement_state
from annotation.services.agreement import dashboard_refresh
from tests.factories import ComparisonFactory, JudgementFactory, UserFactory
from tests.helpers.agreement_jsonl import import_file, synthetic_rows, write_jsonl
from tests.helpers.caches import private_cache

pytestmark = pytest.mark.django_db
BOOT = {"n_boot": 200, "pair_boot": 50}  # fewer draws than the worker's: same seeds, same rule


@pytest.fixture(autouse=True)
def _private_cache(settings):
    """A cache of the test's own (the suite's Redis is shared with other tests and runs)."""
    private_cache(settings, "agreement-incremental-tests")


@pytest.fixture
def project(tmp_path):
    import_file(write_jsonl(tmp_path / "rows.jsonl", synthetic_rows(60)), "inc")
    project = Project.objects.get(slug="inc")
    for prompt in Prompt.objects.filter(project=project):
        prompt.cluster = prompt.pk % 3
        prompt.save(update_fields=["cluster"])
    return project


def _figures(payload: dict) -> dict:
    """The payload without the time it was computed and the note of how the rows were read."""
    return {k: v for k, v in payload.items() if k not in ("computed_at", "read")}


def _refresh_both(project: Project) -> tuple[dict, dict]:
    """The incremental refresh's payload, then a full recomputation's (which keeps its rows)."""
    incremental = dashboard_refresh(project=project, **BOOT)
    full = dashboard_refresh(project=project, incremental=False, **BOOT)
    return incremental, full


def _newcomer_judgements(project: Project, n: int) -> list[Judgement]:
    """n judgements by a new annotator, on the first n comparisons, a left-side lover."""
    frank = UserFactory(username="frank", role="Annotator")
    comparisons = Comparison.objects.filter(project=project).order_by("id")[:n]
    return [
        JudgementFactory(comparison=c, annotator=frank, choice="a", shown_left="a")
        for c in comparisons
    ]


def test_checksums_in_sql_and_in_numpy_agree(project):
    """The database's checksums (one aggregate per table) equal those computed in NumPy over the
    rows read, and an edit moves both the same way."""
    rows = project_rows(project=project, ids=True)
    held = rows_checksum(
        judgements=rows.judgements, comparisons=rows.comparisons, responses=rows.responses,
        prompts=rows.prompts,
    )  # fmt: skip
    database = table_checksums(project=project)
    assert database.same_rows(held)
    assert database.judgements.n == Judgement.objects.filter(comparison__project=project).count()
    judgement = Judgement.objects.filter(comparison__project=project).order_by("id").last()
    judgement.choice = "tie" if judgement.choice != "tie" else "a"
    judgement.save()
    edited = table_checksums(project=project)
    assert edited.judgements.hash_sum != database.judgements.hash_sum
    assert edited.judgements.n == database.judgements.n
    assert edited.comparisons == database.comparisons


def test_the_first_refresh_reads_everything_and_keeps_the_rows(project):
    """No kept rows: a full read, kept in the project's file; the next refresh with nothing
    changed patches nothing and gives the same figures and the same fingerprint as a full read."""
    first = dashboard_refresh(project=project, **BOOT)
    assert first["read"] == {"how": "full", "reason": "no kept rows", "changed": 0,
                             "beside": False}  # fmt: skip
    assert all(path.exists() for path in agreement_state.state_paths(project))
    again, full = _refresh_both(project)
    assert again["read"] == {"how": "incremental", "reason": "nothing changed", "changed": 0,
                             "beside": False}  # fmt: skip
    assert _figures(again) == _figures(full) == _figures(first)
    assert again["fingerprint"] == judgements_fingerprint(project=project)


def test_new_judgements_are_patched_in_with_the_full_figures(project):
    """20 judgements by a new annotator: read by id alone, added to the kept rows; every figure
    (coefficients, intervals, pair kappas and their intervals, per-annotator stats, groups,
    alerts, fingerprint) is the full recomputation's."""
    dashboard_refresh(project=project, **BOOT)
    _newcomer_judgements(project, 20)
    incremental, full = _refresh_both(project)
    assert incremental["read"] == {"how": "incremental", "reason": "judgements changed",
                                   "changed": 20, "beside": False}  # fmt: skip
    assert _figures(incremental) == _figures(full)
    assert incremental["summary"]["n_annotators"] == 6
    assert "frank" in incremental["heatmap"]["annotators"]


def test_edits_are_read_by_their_time_with_the_full_figures(project):
    """Edits through the model (``updated_at`` stamped) are read by their time and put in place of
    the kept rows; added judgements edited in the same window too."""
    dashboard_refresh(project=project, **BOOT)
    added = _newcomer_judgements(project, 5)
    dashboard_refresh(project=project, **BOOT)
    edited = list(Judgement.objects.filter(comparison__project=project).order_by("id")[:7])
    for judgement in [*edited, added[0]]:
        judgement.choice = {"a": "b", "b": "tie", "tie": "a"}[judgement.choice]
        judgement.save()
    incremental, full = _refresh_both(project)
    assert incremental["read"]["how"] == "incremental"
    assert _figures(incremental) == _figures(full)


def test_a_deleted_judgement_falls_back_to_a_full_read(project):
    """A deletion leaves no row to read: the count differs, the refresh reads everything (and
    keeps that), with the full figures."""
    dashboard_refresh(project=project, **BOOT)
    Judgement.objects.filter(comparison__project=project).order_by("id").first().delete()
    incremental, full = _refresh_both(project)
    assert incremental["read"] == {"how": "full", "reason": "judgements deleted or changed unseen",
                                   "changed": 0, "beside": False}  # fmt: skip
    assert _figures(incremental) == _figures(full)
    assert dashboard_refresh(project=project, **BOOT)["read"]["how"] == "incremental"


def test_an_edit_the_watermark_cannot_see_falls_back_to_a_full_read(project):
    """A row changed with an old ``updated_at`` (a bulk update, a restore) is not in the edit
    window, but its hash is in the sum: a full read."""
    dashboard_refresh(project=project, **BOOT)
    judgement = Judgement.objects.filter(comparison__project=project, choice="a").first()
    Judgement.objects.filter(pk=judgement.pk).update(
        choice="b", updated_at=timezone.now() - timedelta(days=3)
    )
    incremental, full = _refresh_both(project)
    assert incremental["read"]["reason"] == "judgements deleted or changed unseen"
    assert _figures(incremental) == _figures(full)


@pytest.mark.parametrize("change", ["gold", "cluster", "response", "comparison"])
def test_comparison_prompt_or_response_changes_fall_back_to_a_full_read(project, change):
    """Gold, a prompt's cluster, a response's text, a comparison removed: not judgements, no
    watermark; their tables' checksums differ and the refresh reads everything."""
    dashboard_refresh(project=project, **BOOT)
    comparison = Comparison.objects.filter(project=project, gold="").order_by("id").first()
    if change == "gold":
        Comparison.objects.filter(pk=comparison.pk).update(gold="b")
    elif change == "cluster":
        Prompt.objects.filter(pk=comparison.prompt_id).update(cluster=7)
    elif change == "response":
        Response.objects.filter(pk=comparison.response_a_id).update(text="A much longer answer.")
    else:
        comparison.delete()
    incremental, full = _refresh_both(project)
    assert incremental["read"]["reason"] == "comparisons, responses or prompts changed"
    assert _figures(incremental) == _figures(full)


def test_a_judgement_of_a_comparison_added_since_falls_back_to_a_full_read(project):
    """A comparison imported after the rows were kept, judged since: the kept comparisons cannot
    number it, so the refresh reads everything (it used to fail making the arrays)."""
    dashboard_refresh(project=project, **BOOT)
    added = ComparisonFactory(project=project)
    JudgementFactory(comparison=added, annotator=UserFactory(username="gina"), choice="a")
    incremental, full = _refresh_both(project)
    assert incremental["read"] == {"how": "full", "reason": "comparisons added", "changed": 0,
                                   "beside": False}  # fmt: skip
    assert _figures(incremental) == _figures(full)


def test_swap_repeats_are_read_whole_each_time(project):
    """Swap repeats are few: every refresh reads them all, so one added since shows (in the
    consistency figures and the fingerprint) as in a full read."""
    dashboard_refresh(project=project, **BOOT)
    for judgement in Judgement.objects.filter(comparison__project=project).order_by("id")[:6]:
        RepeatJudgement.objects.create(
            comparison_id=judgement.comparison_id, annotator_id=judgement.annotator_id,
            choice="tie" if judgement.choice == "a" else judgement.choice, shown_left="b",
        )  # fmt: skip
    incremental, full = _refresh_both(project)
    assert incremental["read"]["reason"] == "nothing changed"
    assert _figures(incremental) == _figures(full)
    assert incremental["fingerprint"][2] == 6
    assert any(row["repeat_n"] for row in incremental["summary"]["annotators"])


def test_project_settings_are_read_fresh(project):
    """The overlap (Fleiss' kappa's items) and the choices offered are not in the rows: a changed
    setting shows in the incremental refresh as in a full one."""
    dashboard_refresh(project=project, **BOOT)
    project.overlap = 2
    project.save()
    incremental, full = _refresh_both(project)
    assert incremental["read"]["how"] == "incremental"
    assert _figures(incremental) == _figures(full)
    assert incremental["n_items_full_overlap"] == 60


def test_a_lost_corrupt_or_foreign_file_reads_everything(project, settings):
    """No file, a file that is not one, another project's: a full read that writes it again."""
    dashboard_refresh(project=project, **BOOT)
    judgements, comparisons = agreement_state.state_paths(project)
    judgements.unlink()
    assert dashboard_refresh(project=project, **BOOT)["read"]["reason"] == "no kept rows"
    comparisons.write_bytes(b"not a file of ours")
    assert dashboard_refresh(project=project, **BOOT)["read"]["reason"] == "no kept rows"
    other = Project.objects.create(name="Other", slug="other")
    dashboard_refresh(project=other, **BOOT)
    agreement_state.state_paths(other)[0].replace(judgements)
    assert dashboard_refresh(project=project, **BOOT)["read"]["reason"] == "no kept rows"
    assert dashboard_refresh(project=project, **BOOT)["read"]["how"] == "incremental"


def test_kept_columns_are_stored_narrow_and_come_back_whole(project):
    """Each kept column is stored in the narrowest integer type that holds it (choice codes in
    int8) and read back as the int64 rows a full read gives, judgements by id."""
    dashboard_refresh(project=project, **BOOT)
    with np.load(agreement_state.state_paths(project)[0]) as stored:
        assert stored["judgements_2"].dtype == np.int8
    kept = agreement_state._load(project)
    rows = project_rows(project=project, ids=True)
    expected = rows.judgements[np.argsort(rows.judgements[:, 6])]
    np.testing.assert_array_equal(kept.rows.judgements, expected)
    np.testing.assert_array_equal(kept.rows.comparisons, rows.comparisons)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_outside_a_transaction_the_maths_runs_beside_the_checksums(project):
    """In the worker (autocommit) the checksums are taken on a connection of their own while the
    report is computed from the rows patched by id: new judgements keep that result, an edit
    patches again and computes again; both give the full recomputation's figures."""
    dashboard_refresh(project=project, **BOOT)
    _newcomer_judgements(project, 12)
    added, full = _refresh_both(project)
    assert added["read"] == {"how": "incremental", "reason": "judgements changed", "changed": 12,
                             "beside": True}  # fmt: skip
    assert _figures(added) == _figures(full)
    judgement = Judgement.objects.filter(comparison__project=project).order_by("id").first()
    judgement.choice = "tie" if judgement.choice != "tie" else "a"
    judgement.save()
    edited, full = _refresh_both(project)
    assert (edited["read"]["how"], edited["read"]["beside"]) == ("incremental", False)
    assert _figures(edited) == _figures(full)
