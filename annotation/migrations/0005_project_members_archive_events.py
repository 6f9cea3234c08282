"""Project archiving, memberships with a role and a pause, and the project audit log.

``Project.members`` gets a through model without moving its data: ProjectMembership takes over the
table Django made for the plain many-to-many (same name, same columns, same unique pair), in the state
only; then the new columns are added to that table with defaults (existing members are annotators).
"""

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0004_comparison_identity_by_external_id"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="project",
            name="lease_minutes",
            field=models.PositiveSmallIntegerField(
                default=30,
                help_text="Minutes an annotator holds a claimed comparison before it returns.",
                validators=[django.core.validators.MinValueValidator(1)],
            ),
        ),
        migrations.AlterField(
            model_name="project",
            name="overlap",
            field=models.PositiveSmallIntegerField(
                default=3,
                help_text="Distinct annotators who judge each comparison.",
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(20),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="project",
            name="strength_scale",
            field=models.PositiveSmallIntegerField(
                default=3,
                help_text=(
                    "Levels of preference strength offered (1 = no strength, 3 = slight/clear/much)."
                ),
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(3),
                ],
            ),
        ),
        migrations.AddField(
            model_name="project",
            name="archived_at",
            field=models.DateTimeField(
                blank=True,
                help_text="Set when archived: no new claims; the data are kept.",
                null=True,
            ),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="ProjectMembership",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "project",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memberships",
                                to="annotation.project",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="project_memberships",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "annotation_project_members",
                        "unique_together": {("project", "user")},
                    },
                ),
                migrations.AlterField(
                    model_name="project",
                    name="members",
                    field=models.ManyToManyField(
                        blank=True,
                        related_name="annotation_projects",
                        through="annotation.ProjectMembership",
                        through_fields=("project", "user"),
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="projectmembership",
            name="role",
            field=models.CharField(
                choices=[("annotator", "Annotator"), ("reviewer", "Reviewer")],
                default="annotator",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="projectmembership",
            name="paused_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="projectmembership",
            name="added_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="projectmembership",
            name="added_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddConstraint(
            model_name="projectmembership",
            constraint=models.CheckConstraint(
                condition=models.Q(("role__in", ["annotator", "reviewer"])),
                name="membership_role_valid",
            ),
        ),
        migrations.CreateModel(
            name="ProjectEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("created", "Project created"),
                            ("edited", "Settings edited"),
                            ("archived", "Archived"),
                            ("unarchived", "Unarchived"),
                            ("member_added", "Member added"),
                            ("member_removed", "Member removed"),
                            ("member_paused", "Member paused"),
                            ("member_resumed", "Member resumed"),
                            ("invited", "Account created with an invite link"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "subject",
                    models.CharField(
                        blank=True, help_text="The member's username.", max_length=150
                    ),
                ),
                ("changes", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "actor",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="annotation.project",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "indexes": [models.Index(fields=["project", "-id"], name="project_event_newest")],
            },
        ),
    ]
