"""Partial indexes for the item browser (issue 30): the gold comparisons by (project, id), so the
gold filter is an index scan (1 in 500 in the 1,000,000-comparison bench), and the active
assignments by comparison, so the live-lease test of "status open" and "in progress" reads a
comparison's lease, not its finished assignments."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0014_trigram_substring_search"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="assignment",
            index=models.Index(
                condition=models.Q(("status", "active")),
                fields=["comparison", "expires_at"],
                name="assignment_active_lease",
            ),
        ),
        migrations.AddIndex(
            model_name="comparison",
            index=models.Index(
                condition=models.Q(("gold", ""), _negated=True),
                fields=["project", "id"],
                name="comparison_gold",
            ),
        ),
    ]
