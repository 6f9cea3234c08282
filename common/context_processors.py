"""Template context shared by every page: the navigation of the user's roles."""

from django.http import HttpRequest
from django.urls import reverse

from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, user_roles


def navigation(request: HttpRequest) -> dict[str, object]:
    """``nav_items``: (label, url) pairs for the roles the user holds; ``user_roles`` for templates."""
    roles = user_roles(request.user)
    items: list[tuple[str, str]] = []
    if ANNOTATOR in roles:
        items.append(("Label", reverse("annotation:my-projects")))
    if REVIEWER in roles:
        items.append(("Review", reverse("monitoring:review-home")))
    if ML_ENGINEER in roles:
        items.append(("Projects", reverse("annotation:project-overview")))
    if ML_ENGINEER in roles or REVIEWER in roles:
        items.append(("Runs", reverse("monitoring:runs")))
        items.append(("Eval rounds", reverse("monitoring:eval-rounds")))
    if ML_ENGINEER in roles:
        items.append(("Admin", reverse("admin:index")))
    return {"nav_items": items, "user_roles": sorted(roles)}
