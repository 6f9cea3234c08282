"""Re-key stored comparisons and responses to the import's identity rule (issue 15).

A comparison imported with an ``id`` is now found by that id (its content_hash is the hash of
["id", external_id]), one without by its content and model names; a response under a prompt by its
text and model name. Rows stored under the old content-only keys are re-keyed so that re-importing
their files finds them instead of creating duplicates. Two comparisons of one project that share an
external id (possible under the old rule) keep their old keys. Irreversible in the data (going back
keeps the new keys, which the old code simply never matches).
"""

import hashlib
import json
from collections import Counter

from django.db import migrations

BATCH = 2000


def _hash(value: object) -> str:
    canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def rekey(apps, schema_editor):
    Comparison = apps.get_model("annotation", "Comparison")
    Response = apps.get_model("annotation", "Response")
    for response in Response.objects.exclude(model_name="").iterator(chunk_size=BATCH):
        new = _hash([response.text, response.model_name])
        if response.content_hash != new:
            Response.objects.filter(pk=response.pk).update(content_hash=new)
    shared = Counter(
        Comparison.objects.exclude(external_id="").values_list("project_id", "external_id")
    )
    comparisons = Comparison.objects.select_related("prompt", "response_a", "response_b")
    for comparison in comparisons.iterator(chunk_size=BATCH):
        if comparison.external_id:
            if shared[(comparison.project_id, comparison.external_id)] > 1:
                continue
            new = _hash(["id", comparison.external_id])
        else:
            a, b = comparison.response_a, comparison.response_b
            if not (a.model_name or b.model_name):
                continue
            prompt = comparison.prompt
            content = prompt.messages if prompt.messages is not None else prompt.text
            new = _hash([content, a.text, b.text, a.model_name, b.model_name])
        if comparison.content_hash != new:
            Comparison.objects.filter(pk=comparison.pk).update(content_hash=new)


class Migration(migrations.Migration):
    dependencies = [("annotation", "0003_clustering")]

    operations = [migrations.RunPython(rekey, migrations.RunPython.noop, elidable=True)]
