"""An import job can be stopped while it runs: the flag its progress reports check."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("annotation", "0020_exportjob_cancel_requested")]

    operations = [
        migrations.AddField(
            model_name="importjob",
            name="cancel_requested",
            field=models.BooleanField(
                default=False,
                help_text="Set while it runs to stop it (and roll it back) at its next progress "
                "report.",
            ),
        ),
    ]
