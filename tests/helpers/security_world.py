"""One small world for the security tests: two projects, a user per role, real objects for every URL.

- ``own``: the project annie (annotator) labels in; bob (another annotator) judged its pairs with a
  rationale containing ``BOB_SECRET``.
- ``other``: a project annie is not a member of.
- An import job, an export, a clustering run with a named cluster, a training run, an active assignment
  for annie and one for bob, so every path parameter can be filled with an object that exists.

``text`` (a callable: field name, index -> string) fills every user-written field, so the XSS test can
put its payloads in the same places the matrix test puts plain words.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from annotation.models import (
    Assignment,
    ClusteringRun,
    ExportJob,
    ImportJob,
    Judgement,
    Project,
    PromptCluster,
)
from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import, project_get_or_create
from common.api_tokens import api_token_create
from common.models import LoginLockout, SsoIdentity
from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, role_assign
from monitoring.models import EvalItem, EvalRound, Judge, JudgeOutput
from monitoring.services import eval_rounds as eval_services
from monitoring.stats.judging import DEFAULT_TEMPLATE
from training.models import Checkpoint, TrainingRun
from training.services import snapshot_for

BOB_SECRET = "bob-private-rationale-7f3a"
PASSWORD = "correct horse battery"


def _plain(field_name: str, index: int) -> str:
    return f"{field_name} {index}"


@dataclass
class World:
    users: dict[str, object]
    own: Project
    other: Project
    annie_assignment: Assignment
    bob_assignment: Assignment
    other_assignment: Assignment
    import_job: ImportJob
    export_sha256: str
    cluster: PromptCluster
    run: TrainingRun
    eval_round: object
    judge: object = None
    judgement_ids: dict[str, int] = field(default_factory=dict)
    annie_token: object = None
    export_job: object = None


def _user(username: str, role: str | None, **flags) -> object:
    user = get_user_model().objects.create(username=username, **flags)
    user.set_password(PASSWORD)
    user.save()
    if role:
        role_assign(user=user, role=role)
    return user


def _rows(project_tag: str, text: Callable[[str, int], str], n: int, rationale: str) -> list[str]:
    return [
        json.dumps(
            {
                "id": f"{project_tag}-{i}",
                "prompt": f"{text('prompt', i)} ({project_tag} {i})",
                "response_a": f"{text('response', 2 * i)} A{i}",
                "response_b": f"{text('response', 2 * i + 1)} B{i}",
                "model_a": "m-a",
                "model_b": "m-b",
                "judgements": [
                    {"annotator": "bob", "choice": "a", "strength": 2, "rationale": rationale}
                ],
            }
        )
        for i in range(n)
    ]


def world_build(
    *, text: Callable[[str, int], str] = _plain, rationale: str = BOB_SECRET, n_pairs: int = 4
) -> World:
    """Create the world (needs database access; writes an export under settings.EXPORT_DIR)."""
    users = {
        "annotator": _user("annie", ANNOTATOR),
        "bob": _user("bob", ANNOTATOR),
        "reviewer": _user("rev", REVIEWER),
        "ml_engineer": _user("emily", ML_ENGINEER),
        "superuser": _user("root", None, is_staff=True, is_superuser=True),
    }
    own, _ = project_get_or_create(
        slug="own", name=text("project name", 0), guidelines=text("guidelines", 0), overlap=3
    )
    other, _ = project_get_or_create(
        slug="other", name=text("project name", 1), guidelines=text("guidelines", 1), overlap=3
    )
    comparisons_import(project=own, lines=_rows("own", text, n_pairs, rationale))
    comparisons_import(project=other, lines=_rows("other", text, 2, rationale))
    own.members.add(users["annotator"], users["bob"])
    other.members.add(users["bob"])

    expires = timezone.now() + timedelta(minutes=30)
    own_pairs = list(own.comparisons.order_by("pk"))
    annie_assignment = Assignment.objects.create(
        comparison=own_pairs[0], annotator=users["annotator"], shown_left="a", expires_at=expires
    )
    bob_assignment = Assignment.objects.create(
        comparison=own_pairs[1], annotator=users["bob"], shown_left="a", expires_at=expires
    )
    other_assignment = Assignment.objects.create(
        comparison=other.comparisons.first(), annotator=users["bob"], shown_left="b",
        expires_at=expires,
    )  # fmt: skip

    import_job = ImportJob.objects.create(
        project=own, created_by=users["ml_engineer"], path="/nonexistent/upload.jsonl",
        original_name=text("file name", 0), size_bytes=10, status=ImportJob.Status.FAILED,
        errors=[{"line": 1, "field": "prompt", "message": text("import error", 0)}],
    )  # fmt: skip
    export = dataset_export(project=own, created_by=users["ml_engineer"])
    export_job = ExportJob.objects.create(
        project=own, created_by=users["ml_engineer"], options={"consensus": "majority"},
        build_hf=True, export=export, status=ExportJob.Status.FAILED,
        error=text("export error", 0),
    )  # fmt: skip
    clustering = ClusteringRun.objects.create(
        project=own, status=ClusteringRun.Status.SUCCEEDED, model_name="all-minilm-l6-v2", k=2,
        n_prompts=n_pairs, progress=1.0,
        projection={"prompt_ids": [], "labels": [], "x": [], "y": []},
    )  # fmt: skip
    cluster = PromptCluster.objects.create(
        run=clustering, label=0, name=text("cluster name", 0), size=2, share=0.5,
        top_terms=[text("top term", 0)],
    )  # fmt: skip
    PromptCluster.objects.create(
        run=clustering, label=1, name=text("cluster name", 1), size=2, share=0.5
    )
    run = TrainingRun.objects.create(
        name=text("run name", 0), kind="dpo", base_model="smollm2-135m-instruct",
        snapshot=snapshot_for(export=export), config={}, created_by=users["ml_engineer"],
    )  # fmt: skip
    # A folder that exists (a round is created only on a checkpoint still on disk), in tmp.
    folder = Path(settings.EXPORT_DIR) / "run-checkpoint"
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint = Checkpoint.objects.create(run=run, step=4, path=str(folder))
    # Two prompts that came after the export, unlabelled: held out of the run, a round draws them.
    held_out = [json.loads(r) | {"judgements": []} for r in _rows("held", text, 2, rationale)]
    comparisons_import(project=own, lines=[json.dumps(r) for r in held_out])
    eval_round = eval_services.round_create(
        checkpoint=checkpoint, project=own, size=2, created_by=users["ml_engineer"],
        baseline_model="smollm2-135m-instruct", enqueue=False,
    )  # fmt: skip
    for item in eval_round.items.all():
        EvalItem.objects.filter(pk=item.pk).update(
            checkpoint_text=text("checkpoint answer", item.position),
            baseline_text=text("baseline answer", item.position),
            checkpoint_tokens=8, baseline_tokens=4,
        )  # fmt: skip
    EvalRound.objects.filter(pk=eval_round.pk).update(status="open")
    # A model judge of ``own`` with one unparsed answer (its raw text shown on the report page).
    judge = Judge.objects.create(
        project=own, name="judge", version=1, kind="local_llm", model_name="smollm2-135m-instruct",
        template=DEFAULT_TEMPLATE, status="succeeded", done=1, total=2 * n_pairs,
        annotator=get_user_model().objects.create_user(username="judge:own:judge:v1", is_active=False),
    )  # fmt: skip
    JudgeOutput.objects.create(
        judge=judge, comparison=own_pairs[0], shown_first="a", raw=text("judge answer", 0),
        parse_error="no verdict found", seconds=0.5,
    )  # fmt: skip
    judgement_ids = {
        j.comparison.project.slug: j.pk
        for j in Judgement.objects.select_related("comparison__project")
    }
    # annie's API token (its name user-written) and a login lockout (the admin lists it).
    annie_token = api_token_create(user=users["annotator"], name=text("token name", 0)).token
    LoginLockout.objects.create(
        kind="account",
        subject="bob",
        failures=10,
        locked_until=timezone.now() + timedelta(minutes=15),
    )
    # annie signed in once through single sign-on (the provider's subject: text it chose).
    SsoIdentity.objects.create(
        user=users["annotator"], issuer="https://idp.example", subject=text("sso subject", 0)[:255]
    )
    return World(
        users=users, own=own, other=other, annie_assignment=annie_assignment,
        bob_assignment=bob_assignment, other_assignment=other_assignment, import_job=import_job,
        export_sha256=export.sha256, cluster=cluster, run=run, eval_round=eval_round,
        judge=judge, judgement_ids=judgement_ids, annie_token=annie_token,
        export_job=export_job,
    )  # fmt: skip
