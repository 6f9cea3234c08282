"""Round judges: a judge on an eval round, the reviewers' random subset with inclusion probabilities,
the judge's verdicts per item and order, and the estimate a stop decision rested on."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0007_adjudication"),
        ("monitoring", "0004_machine_judge_accounts"),
        ("training", "0003_preference_kinds"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="EvalJudgeVerdict",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "shown_first",
                    models.CharField(
                        choices=[("checkpoint", "Checkpoint"), ("baseline", "Baseline")],
                        max_length=10,
                    ),
                ),
                (
                    "preference",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("a", "Checkpoint better"),
                            ("b", "Baseline better"),
                            ("tie", "Tie"),
                        ],
                        max_length=3,
                    ),
                ),
                ("usefulness", models.FloatField(blank=True, null=True)),
                ("raw", models.TextField(blank=True)),
                ("parse_error", models.CharField(blank=True, max_length=300)),
                (
                    "score_diff",
                    models.FloatField(
                        blank=True,
                        help_text="reward_model: r(checkpoint) - r(baseline).",
                        null=True,
                    ),
                ),
                (
                    "seconds",
                    models.FloatField(
                        help_text="Wall time spent on this answer (its share of a batch)."
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["item", "shown_first"],
            },
        ),
        migrations.AddField(
            model_name="evalitem",
            name="for_humans",
            field=models.BooleanField(
                default=True,
                help_text="Drawn for the reviewers (every item when the round has no judge).",
            ),
        ),
        migrations.AddField(
            model_name="evalitem",
            name="inclusion_probability",
            field=models.FloatField(
                default=1.0, help_text="The chance this item had of being drawn for the reviewers."
            ),
        ),
        migrations.AddField(
            model_name="evalround",
            name="human_fraction",
            field=models.FloatField(
                default=1.0,
                help_text="Share of the items sent to reviewers (a seeded random subset); 1: all.",
            ),
        ),
        migrations.AddField(
            model_name="evalround",
            name="judge",
            field=models.ForeignKey(
                blank=True,
                help_text="A model judge of the round's project that rates every item (both orders).",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="eval_rounds",
                to="monitoring.judge",
            ),
        ),
        migrations.AddField(
            model_name="evalround",
            name="judge_done",
            field=models.PositiveIntegerField(
                default=0, help_text="(item, order) verdicts stored."
            ),
        ),
        migrations.AddField(
            model_name="evalround",
            name="judge_error",
            field=models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name="evalround",
            name="judge_status",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "No judge"),
                    ("waiting", "Waiting for the responses"),
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                ],
                default="",
                help_text="State of the judge's job over the round's items.",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="evalround",
            name="judge_total",
            field=models.PositiveIntegerField(default=0, help_text="2 x the round's items."),
        ),
        migrations.AddField(
            model_name="evalround",
            name="min_human_items",
            field=models.PositiveIntegerField(
                default=20, help_text="Reviewers rate at least this many items (all when fewer)."
            ),
        ),
        migrations.AddField(
            model_name="stopdecision",
            name="estimate",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="The estimates the panel showed: per metric source, estimate, low, high, n, reason; and the kappa threshold in force.",
            ),
        ),
        migrations.AddField(
            model_name="stopdecision",
            name="estimate_source",
            field=models.CharField(
                blank=True,
                choices=[("human", "Human-only"), ("ppi", "Prediction-powered")],
                help_text="Which estimate of the round backed the decision (blank: no rated round).",
                max_length=5,
            ),
        ),
        migrations.AddConstraint(
            model_name="evalround",
            constraint=models.CheckConstraint(
                condition=models.Q(("human_fraction__gt", 0), ("human_fraction__lte", 1)),
                name="eval_round_human_fraction",
            ),
        ),
        migrations.AddConstraint(
            model_name="evalround",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("judge__isnull", False), ("human_fraction", 1), _connector="OR"
                ),
                name="eval_round_sampling_needs_judge",
            ),
        ),
        migrations.AddField(
            model_name="evaljudgeverdict",
            name="item",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="judge_verdicts",
                to="monitoring.evalitem",
            ),
        ),
        migrations.AddField(
            model_name="evaljudgeverdict",
            name="judge",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="round_verdicts",
                to="monitoring.judge",
            ),
        ),
        migrations.AddConstraint(
            model_name="evaljudgeverdict",
            constraint=models.UniqueConstraint(
                fields=("item", "judge", "shown_first"), name="eval_judge_verdict_once_per_order"
            ),
        ),
        migrations.AddConstraint(
            model_name="evaljudgeverdict",
            constraint=models.CheckConstraint(
                condition=models.Q(("preference", ""), ("parse_error", ""), _connector="XOR"),
                name="eval_judge_verdict_or_error",
            ),
        ),
        migrations.AddConstraint(
            model_name="evaljudgeverdict",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("usefulness__isnull", True),
                    models.Q(("usefulness__gte", 1), ("usefulness__lte", 5)),
                    _connector="OR",
                ),
                name="eval_judge_usefulness_1_to_5",
            ),
        ),
    ]
