from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0012_eval_assignment_queue_states"),
    ]

    operations = [
        migrations.AlterField(
            model_name="stopdecision",
            name="decision",
            field=models.CharField(
                choices=[
                    ("stop", "Stop training"),
                    ("continue", "Continue"),
                    ("rollback", "Roll back to a checkpoint"),
                    ("reject", "Reject the run, keep the base model"),
                ],
                max_length=8,
            ),
        ),
    ]
