"""The item browser's gold filter (issue 30): a partial index on (project, id) of the gold
comparisons, so a page of them is an index scan instead of a walk of the project (1 in 500 in the
1,000,000-comparison bench)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0013_trigram_substring_search"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="comparison",
            index=models.Index(
                condition=models.Q(("gold", ""), _negated=True),
                fields=["project", "id"],
                name="comparison_gold",
            ),
        ),
    ]
