"""An export job can be stopped while it runs: the flag its progress writes check."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("annotation", "0019_item_browser_index_walks")]

    operations = [
        migrations.AddField(
            model_name="exportjob",
            name="cancel_requested",
            field=models.BooleanField(
                default=False,
                help_text="Set while it runs to stop it at its next progress write.",
            ),
        ),
    ]
