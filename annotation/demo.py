"""Load the demo project: team-written prompts with SmolLM2 responses (demo/comparisons.jsonl),
demo accounts for every role, and the demo annotators' (simulated) judgements. Idempotent."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from annotation.demo_items import demo_items_load
from annotation.services.importing import ImportResult, comparisons_import, project_get_or_create
from common.errors import ConcordError
from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, role_assign

DEMO_PASSWORD = "concord-demo"  # noqa: S105 - demo accounts only; refused in production  # nosec B105
DEMO_SLUG = "demo"
DEMO_COMPARISONS = Path(settings.BASE_DIR) / "demo" / "comparisons.jsonl"
DEMO_ACCOUNTS = (
    ("ana", ANNOTATOR),
    ("ben", ANNOTATOR),
    ("chloe", ANNOTATOR),
    ("dev", ANNOTATOR),
    ("rita", REVIEWER),
    ("mel", ML_ENGINEER),
)
DEMO_GUIDELINES = """\
# How to judge a pair

Read the prompt, then both responses. Pick the response you would rather receive.

- **Helpful first**: does it answer what was asked, correctly and completely?
- **Honest**: invented facts are worse than a short answer.
- **Harmless**: for risky requests, a careful refusal or a safe redirection is better than compliance.
- **Tie** when neither is clearly better. Length alone is not a reason to prefer a response.

Keys: `1` left better, `2` right better, `3` tie; hold `Shift` for "much better".
"""


@dataclass(frozen=True)
class DemoReport:
    accounts: list[tuple[str, str]]
    imported: ImportResult
    items_created: dict[str, int]


@transaction.atomic
def demo_load(*, comparisons_path: Path = DEMO_COMPARISONS) -> DemoReport:
    """Create the demo accounts and projects (pairwise, rating, ranking) and import their items
    (safe to run again)."""
    if settings.PRODUCTION:
        raise ConcordError("the demo (with its known passwords) cannot be loaded in production")
    if not comparisons_path.is_file():
        raise ConcordError(f"demo data not found at {comparisons_path}")
    user_model = get_user_model()
    accounts: list[tuple[str, str]] = []
    members = []
    for username, role in DEMO_ACCOUNTS:
        user, created = user_model.objects.get_or_create(username=username)
        if created or not user.has_usable_password():
            user.set_password(DEMO_PASSWORD)
            user.is_active = True
            user.save()
        role_assign(user=user, role=role)
        accounts.append((username, role))
        if role == ANNOTATOR:
            members.append(user)
    admin, created = user_model.objects.get_or_create(
        username="admin", defaults={"is_staff": True, "is_superuser": True}
    )
    if created:
        admin.set_password(DEMO_PASSWORD)
        admin.save()
    accounts.append(("admin", "superuser"))

    project, _ = project_get_or_create(
        slug=DEMO_SLUG,
        name="Demo: SmolLM2 answers",
        guidelines=DEMO_GUIDELINES,
        overlap=3,
        allow_ties=True,
        allow_both_bad=True,
    )
    project.members.add(*members)
    imported = comparisons_import(project=project, lines=comparisons_path)
    rows = [json.loads(line) for line in comparisons_path.read_text().splitlines() if line.strip()]
    items = demo_items_load(comparison_rows=rows, members=members)
    return DemoReport(accounts=accounts, imported=imported, items_created=items)
