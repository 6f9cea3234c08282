from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training", "0006_continuous_reward_model"),
    ]

    operations = [
        migrations.AddField(
            model_name="trainingrun",
            name="result_is_base",
            field=models.BooleanField(
                default=False,
                help_text="A reviewer rejected the run: no checkpoint of it beats its base model, which stays the model to use.",
            ),
        ),
    ]
