"""The item browser: a project's comparisons in a filtered, keyset-paged table, and one item's page.
Thin: check the role, call a selector, render."""

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from annotation.models import Project
from annotation.selectors import items as selectors
from annotation.selectors.clustering import clustering_run_current
from annotation.selectors.item_detail import item_detail
from annotation.views.pairwise_only import pairwise_only
from common.errors import ConcordError
from common.roles import ML_ENGINEER, role_required


@role_required(ML_ENGINEER, methods=("GET",))
@pairwise_only("The item browser")
def items_browse(request: HttpRequest, slug: str) -> HttpResponse:
    """The table: filters in the GET parameters (a URL can be shared), ``after``/``before`` cursors."""
    project = get_object_or_404(Project, slug=slug)
    run = clustering_run_current(project=project)
    context = {
        "project": project,
        "params": request.GET,
        "statuses": list(selectors.STATUS_LABELS.items()),
        "agreements": selectors.AGREEMENTS,
        "sorts": list(selectors.SORTS),
        "clusters": list(run.clusters.all()) if run else [],
    }
    try:
        filters = selectors.ItemFilters.from_params(request.GET)
        page = selectors.items_page(
            project=project,
            filters=filters,
            after=request.GET.get("after") or None,
            before=request.GET.get("before") or None,
        )
    except ConcordError as exc:
        context["error"] = str(exc)
        return render(request, "annotation/items/browse.html", context, status=400)
    query = request.GET.copy()
    query.pop("after", None)
    query.pop("before", None)
    context |= {"filters": filters, "page": page, "query": query.urlencode()}
    return render(request, "annotation/items/browse.html", context)


@role_required(ML_ENGINEER, methods=("GET",))
@pairwise_only("The item page")
def item_page(request: HttpRequest, slug: str, comparison_id: int) -> HttpResponse:
    """One comparison: prompt, both responses, judgements, consensus under each rule, history."""
    project = get_object_or_404(Project, slug=slug)
    detail = item_detail(project=project, comparison_id=comparison_id)
    if detail is None:
        raise Http404
    back = request.GET.get("back", "")
    context = {"project": project, "item": detail, "back": back if back.startswith("?") else ""}
    return render(request, "annotation/items/item.html", context)
