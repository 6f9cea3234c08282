"""The lead's "Download archive" link: the project's whole history as one archive file.

Thin: check the role, write the archive through the service into a temporary file, stream it back.
The archive is written in the request (a large project takes as long as ``archive_project``: about
as long as an export; a background job would suit projects of millions of judgements).
"""

import tempfile

from django.contrib import messages
from django.http import FileResponse, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect

from annotation.models import Project
from annotation.services.archives import project_archive_write
from common.archive import archive_filename
from common.errors import ConcordError
from common.roles import ML_ENGINEER, role_required


@role_required(ML_ENGINEER, methods=("GET",))
def project_archive_download(request: HttpRequest, slug: str) -> HttpResponse:
    """GET: the archive file of project ``slug`` (a zip), as an attachment; when it cannot be
    written, back to the settings page with the reason."""
    project = get_object_or_404(Project, slug=slug)
    handle = tempfile.TemporaryFile()  # noqa: SIM115 - the response closes (and so removes) it
    try:
        project_archive_write(project=project, out=handle)
    except ConcordError as exc:
        handle.close()
        messages.error(request, f"The archive could not be written: {exc}")
        return redirect("annotation:project-settings", slug=project.slug)
    handle.seek(0)
    return FileResponse(
        handle, as_attachment=True, filename=archive_filename(project.slug),
        content_type="application/zip",
    )  # fmt: skip
