import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0009_imported_judges"),
        ("training", "0001_runs"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoppingPanelFigures",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("payload", models.JSONField(help_text="The figures (JSON; NaN stored as null).")),
                (
                    "fingerprint",
                    models.CharField(help_text="SHA-256 of the inputs.", max_length=64),
                ),
                (
                    "version",
                    models.PositiveSmallIntegerField(help_text="The payload's layout version."),
                ),
                ("computed_at", models.DateTimeField()),
                (
                    "run",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="stopping_figures",
                        to="training.trainingrun",
                    ),
                ),
            ],
        ),
    ]
