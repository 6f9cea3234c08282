"""A judge's machine account never counts as a person: with a judge's verdicts stored as judgements,
the export, the agreement dashboard, progress, the adjudication queue, the item browser and the
member list are exactly what they were before; the judge report still reads the judge."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotation.models import Judgement
from annotation.selectors.adjudication import adjudication_queue, judgements_per_version
from annotation.selectors.agreement import annotator_disagreements, judgements_fingerprint
from annotation.selectors.item_detail import MODEL_JUDGE, item_detail
from annotation.selectors.items import ItemFilters, items_queryset
from annotation.selectors.members import project_members
from annotation.selectors.projects import annotator_progress, batch_progress, projects_overview
from annotation.services.agreement import agreement_dashboard, project_agreement
from annotation.services.exporting import dataset_export
from common.errors import ConcordError
from common.roles import MACHINE_JUDGE, human_judgements, is_machine_account
from monitoring.selectors import judges as judge_selectors
from monitoring.services import judges as judge_services
from tests.helpers.judge_world import judge_outputs_by_hand, reward_model_judge

pytestmark = pytest.mark.django_db


def _figures(project) -> dict:
    """What people see of the project, as plain values."""
    dashboard = agreement_dashboard(project_agreement(project=project, n_boot=20))
    dashboard.pop("computed_at")
    export = dataset_export(project=project)
    by_agreement = {
        kind: sorted(
            items_queryset(
                project=project, filters=ItemFilters.from_params({"agreement": kind})
            ).values_list("pk", flat=True)
        )
        for kind in ("unjudged", "single", "unanimous", "split")
    }
    return {
        "export": (export.pk, export.n_judgements, export.n_pairs),
        "dashboard": dashboard,
        "fingerprint": judgements_fingerprint(project=project),
        "overview": [(p.units, p.answers, p.complete) for p in projects_overview()],
        "annotators": annotator_progress(project=project),
        "batches": batch_progress(project=project),
        "queue": adjudication_queue(project=project),
        "versions": judgements_per_version(project=project),
        "items": by_agreement,
        "members": [m.username for m in project_members(project=project)],
        "disagreements": annotator_disagreements(project=project, username="ann3"),
    }


def test_judge_verdicts_change_nothing_people_see(judged_project, reward_run):
    project = judged_project
    people = get_user_model().objects.filter(username__startswith="ann")
    project.members.add(*human_judgements(people, "pk"))
    before = _figures(project)
    judge = reward_model_judge(project, reward_run)
    # The judge says "b" on every pair in both orders: it would flip majorities if it counted.
    judge_outputs_by_hand(judge, [("b", "b")] * 6)
    assert judge_services.judge_verdicts_store(judge=judge) == 6
    machine = judge.annotator
    project.members.add(machine)  # even a membership does not make it a person
    assert Judgement.objects.filter(annotator=machine).count() == 6
    assert is_machine_account(machine)
    assert machine.groups.get().name == MACHINE_JUDGE

    assert _figures(project) == before

    with pytest.raises(ConcordError, match="no user named"):
        items_queryset(
            project=project, filters=ItemFilters.from_params({"annotator": machine.username})
        )
    detail = item_detail(project=project, comparison_id=project.comparisons.order_by("pk")[0].pk)
    origins = {row.judgement.annotator.username: row.origin for row in detail.judgements}
    assert origins[machine.username] == MODEL_JUDGE
    assert sum(1 for o in origins.values() if o != MODEL_JUDGE) == 3
    assert detail.consensus[0].choice == "a"  # ann1..3 said a, a, a; the judge b

    summary = judge_selectors.judge_report_summary(judge_selectors.judge_report_data(judge=judge))
    assert summary["answers"] == 12 and summary["verdicts"] == 12
    assert [row["annotator"] for row in summary["kappa_per_human"]] == ["ann1", "ann2", "ann3"]
    assert judge_selectors.machine_annotator_ids() == {machine.pk}


def test_the_machine_group_is_made_by_migration():
    assert Group.objects.filter(name=MACHINE_JUDGE).exists()


def test_the_migration_marks_the_machine_accounts_of_existing_judges(judged_project, reward_run):
    """Judges made before the group existed: monitoring 0004 puts their accounts in it."""
    machine = reward_model_judge(judged_project, reward_run).annotator
    machine.groups.clear()
    assert not is_machine_account(machine)
    if connection.vendor == "postgresql":  # rows written in this transaction: run their checks now
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.migrate([("monitoring", "0003_judges")])
    executor.loader.build_graph()
    executor.migrate([("monitoring", "0004_machine_judge_accounts")])
    assert is_machine_account(machine)


def test_imported_verdicts_change_nothing_people_see(judged_project):
    """An imported judge's verdicts (kind "imported", from a file) are a judge's too: stored under
    its machine account, they change nothing people see, and the report still reads them."""
    from monitoring.services.judge_imports import judge_verdicts_import

    project = judged_project
    people = get_user_model().objects.filter(username__startswith="ann")
    project.members.add(*human_judgements(people, "pk"))
    before = _figures(project)
    # "b" everywhere would flip majorities if it counted; the last pair inconsistent across orders.
    lines = [f'{{"id": "pair-{k}", "verdict": "b"}}' for k in range(5)]
    lines.append('{"id": "pair-5", "verdict": "inconsistent"}')
    judge = judge_verdicts_import(
        project=project, name="released", description="hand-written", lines=lines, fmt="jsonl"
    ).judge
    machine = judge.annotator
    project.members.add(machine)
    assert Judgement.objects.filter(annotator=machine).count() == 6
    assert is_machine_account(machine) and machine.groups.get().name == MACHINE_JUDGE

    assert _figures(project) == before

    summary = judge_selectors.judge_report_summary(judge_selectors.judge_report_data(judge=judge))
    assert (summary["kind"], summary["verdicts"], summary["swap_undetailed"]) == ("imported", 6, 1)
    assert [row["annotator"] for row in summary["kappa_per_human"]] == ["ann1", "ann2", "ann3"]
    assert judge_selectors.machine_annotator_ids() == {machine.pk}
