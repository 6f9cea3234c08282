"""The stored consensus loses its index on the project alone (issue 30): its indexes on
(project, margin), (project, votes) and the split rows all lead with the project, and a refit
rewrites every row of a project, each rewrite writing one entry in every index."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0015_item_browser_partial_indexes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="storedconsensus",
            name="project",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="annotation.project",
            ),
        ),
    ]
