"""Alerts on training runs; human-eval rounds and stopping decisions will live here too."""

from __future__ import annotations

from django.db import models

from training.models import TrainingRun


class Alert(models.Model):
    """A metric of a run crossed its threshold (PIPELINE.md's table); one open alert per metric."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="alerts")
    metric = models.CharField(max_length=64)
    value = models.FloatField()
    threshold = models.FloatField()
    direction = models.CharField(max_length=1, help_text="'>' above or '<' below the threshold")
    step = models.PositiveIntegerField()
    meaning = models.CharField(max_length=200)
    diagnosis = models.TextField(help_text="The matching step of PIPELINE.md's diagnosis order.")
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "metric"],
                condition=models.Q(resolved_at__isnull=True),
                name="alert_one_open_per_metric",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.metric} {self.direction} {self.threshold} at step {self.step}"
