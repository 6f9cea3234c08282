"""Alerts on training runs, human-eval rounds (rounds, items, assignments, judgements and repeat
judgements, a judge's verdicts on a round), stopping decisions and the stored stopping-panel
figures.

Long module: Django reads an app's tables from its models module, and the eval rounds' tables
(rounds, items, the work queue's leases and their answers, judges' verdicts) are read together.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from annotation.models import Assignment
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


# --- Human-eval rounds and stopping decisions ------------------------------------------------------


class JudgeStatus(models.TextChoices):
    """State of a round's judge job (``EvalRound.judge_status``)."""

    NONE = "", "No judge"
    WAITING = "waiting", "Waiting for the responses"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class GenerationStatus(models.TextChoices):
    """State of a round's generation job (``EvalRound.generation_status``): the one job lifecycle."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class EvalRound(models.Model):
    """A checkpoint judged by reviewers against a baseline (a registry model or an earlier
    checkpoint) on a frozen, cluster-stratified set of held-out prompts.

    With a ``judge``, the judge rates every item and reviewers rate a seeded random subset
    (``human_fraction`` of the items, at least ``min_human_items``; ``EvalItem.for_humans``), so
    the round's win rate and usefulness get a prediction-powered interval (monitoring/stats/ppi.py).
    """

    class Status(models.TextChoices):
        GENERATING = "generating", "Generating responses"
        OPEN = "open", "Open for ratings"
        CLOSED = "closed", "Closed"
        FAILED = "failed", "Failed"

    checkpoint = models.ForeignKey(
        "training.Checkpoint", on_delete=models.CASCADE, related_name="eval_rounds"
    )
    project = models.ForeignKey(
        "annotation.Project", on_delete=models.PROTECT, related_name="eval_rounds"
    )
    baseline_model = models.CharField(
        max_length=100, blank=True, help_text="Registry name of the baseline (SFT / base model)."
    )
    baseline_checkpoint = models.ForeignKey(
        "training.Checkpoint",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Or an earlier checkpoint as the baseline.",
    )
    prompt_ids = models.JSONField(default=list, help_text="The frozen held-out prompts, in order.")
    size = models.PositiveIntegerField()
    reviewers_per_item = models.PositiveSmallIntegerField(default=3)
    repeat_every = models.PositiveSmallIntegerField(
        default=0,
        help_text="Every n-th item a reviewer is given repeats one they rated at least "
        "REPEAT_MIN_DISTANCE items before, sides flipped (self-consistency); 0: no repeats.",
    )
    ci_width = models.FloatField(default=0.1, help_text="Wanted width of the win rate's interval.")
    sample_size_hint = models.PositiveIntegerField(default=0)
    sampling = models.JSONField(default=dict, blank=True)
    endpoint = models.JSONField(
        default=dict,
        blank=True,
        help_text="Empty: generate in-process on the gpu worker. Else an OpenAI-compatible "
        "endpoint that serves both models: base_url, checkpoint_model, baseline_model, "
        "api_key_env (a variable's name), max_concurrency, timeout_s.",
    )
    seed = models.IntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.GENERATING)
    error = models.TextField(blank=True)
    answers_done = models.PositiveIntegerField(
        default=0, help_text="Answers generated so far (the checkpoint's, then the baseline's)."
    )
    answers_total = models.PositiveIntegerField(
        default=0, help_text="Answers to generate: 2 x the round's items (0 before it starts)."
    )
    # The generation job (queued -> running -> succeeded / failed); ``status`` is the round's.
    generation_status = models.CharField(
        max_length=10, choices=GenerationStatus.choices, default=GenerationStatus.QUEUED
    )
    generation_worker = models.CharField(max_length=200, blank=True)
    generation_heartbeat_at = models.DateTimeField(null=True, blank=True)
    generation_started_at = models.DateTimeField(null=True, blank=True)
    generation_finished_at = models.DateTimeField(null=True, blank=True)
    judge = models.ForeignKey(
        "monitoring.Judge",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="eval_rounds",
        help_text="A model judge of the round's project that rates every item (both orders).",
    )
    human_fraction = models.FloatField(
        default=1.0,
        help_text="Share of the items sent to reviewers (a seeded random subset); 1: all.",
    )
    min_human_items = models.PositiveIntegerField(
        default=20, help_text="Reviewers rate at least this many items (all when fewer)."
    )
    judge_status = models.CharField(
        max_length=10,
        blank=True,
        choices=JudgeStatus.choices,
        default=JudgeStatus.NONE,
        help_text="State of the judge's job over the round's items.",
    )
    judge_done = models.PositiveIntegerField(default=0, help_text="(item, order) verdicts stored.")
    judge_total = models.PositiveIntegerField(default=0, help_text="2 x the round's items.")
    judge_error = models.TextField(blank=True)
    judge_worker = models.CharField(max_length=200, blank=True)
    judge_heartbeat_at = models.DateTimeField(null=True, blank=True)
    judge_started_at = models.DateTimeField(null=True, blank=True)
    judge_finished_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(human_fraction__gt=0, human_fraction__lte=1),
                name="eval_round_human_fraction",
            ),
            models.CheckConstraint(
                condition=models.Q(judge__isnull=False) | models.Q(human_fraction=1),
                name="eval_round_sampling_needs_judge",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(baseline_checkpoint__isnull=True) & ~models.Q(baseline_model="")
                )
                | (models.Q(baseline_checkpoint__isnull=False) & models.Q(baseline_model="")),
                name="eval_round_one_baseline",
            ),
            models.CheckConstraint(
                condition=models.Q(reviewers_per_item__gte=1), name="eval_round_reviewers"
            ),
        ]

    def __str__(self) -> str:
        return f"round {self.pk}: {self.checkpoint} vs {self.baseline_label}"

    @property
    def baseline_label(self) -> str:
        if self.baseline_checkpoint_id:
            return f"step {self.baseline_checkpoint.step}"
        return self.baseline_model


class EvalItem(models.Model):
    """One held-out prompt of a round with both models' responses (lengths in tokens)."""

    round = models.ForeignKey(EvalRound, on_delete=models.CASCADE, related_name="items")
    prompt = models.ForeignKey("annotation.Prompt", on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField()
    checkpoint_text = models.TextField(blank=True)
    baseline_text = models.TextField(blank=True)
    checkpoint_tokens = models.PositiveIntegerField(default=0)
    baseline_tokens = models.PositiveIntegerField(default=0)
    reward_score = models.FloatField(
        null=True, blank=True, help_text="The reward model's score of the checkpoint's response."
    )
    for_humans = models.BooleanField(
        default=True, help_text="Drawn for the reviewers (every item when the round has no judge)."
    )
    inclusion_probability = models.FloatField(
        default=1.0, help_text="The chance this item had of being drawn for the reviewers."
    )

    class Meta:
        ordering = ["round", "position"]
        constraints = [
            models.UniqueConstraint(fields=["round", "prompt"], name="eval_item_prompt_once")
        ]

    def __str__(self) -> str:
        return f"round {self.round_id} item {self.position}"


class EvalAssignment(models.Model):
    """An item handed to a reviewer: the work queue's lease (annotation.work_queue.policy's kinds
    and states), with the side the checkpoint's response is shown on.

    ``kind``: a normal rating (counted against ``reviewers_per_item``) or a repeat of an item the
    reviewer rated before (sides flipped; its answer is an EvalRepeatJudgement, outside the
    round's results). ``status``: active (shown, unanswered), done or skipped (a skipped item
    goes back to the pool, never to the same reviewer)."""

    class Side(models.TextChoices):
        CHECKPOINT = "checkpoint", "Checkpoint"
        BASELINE = "baseline", "Baseline"

    class Kind(models.TextChoices):
        NORMAL = Assignment.Kind.NORMAL.value, "Normal"
        REPEAT = Assignment.Kind.REPEAT.value, "Repeat"

    Status = Assignment.Status

    item = models.ForeignKey(EvalItem, on_delete=models.CASCADE, related_name="assignments")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="eval_assignments"
    )
    shown_left = models.CharField(max_length=10, choices=Side.choices)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.NORMAL)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["item", "reviewer", "kind"], name="eval_item_once_per_reviewer_kind"
            )
        ]

    def __str__(self) -> str:
        return f"{self.item} -> {self.reviewer} ({self.kind}, {self.status})"


# The stored pair an eval-round screen shows, in common.sides' (first, second) order.
EVAL_PAIR = (EvalAssignment.Side.CHECKPOINT, EvalAssignment.Side.BASELINE)


class EvalJudgement(models.Model):
    """A reviewer's blind verdict: preference (a = the checkpoint, b = the baseline, tie) and the
    1-5 usefulness of the checkpoint's response."""

    class Preference(models.TextChoices):
        CHECKPOINT = "a", "Checkpoint better"
        BASELINE = "b", "Baseline better"
        TIE = "tie", "Tie"

    assignment = models.OneToOneField(
        EvalAssignment, on_delete=models.CASCADE, related_name="judgement"
    )
    preference = models.CharField(max_length=3, choices=Preference.choices)
    usefulness = models.PositiveSmallIntegerField()
    note = models.TextField(blank=True)
    elapsed_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(usefulness__gte=1, usefulness__lte=5),
                name="eval_usefulness_1_to_5",
            )
        ]

    def __str__(self) -> str:
        return f"{self.assignment}: {self.preference}, usefulness {self.usefulness}"

    @property
    def outcome(self) -> float:
        """The checkpoint's result: 1 win, 0.5 tie, 0 loss."""
        return {"a": 1.0, "tie": 0.5, "b": 0.0}[self.preference]


class EvalRepeatJudgement(models.Model):
    """A reviewer's second verdict on an item they rated before (a repeat assignment, sides
    flipped), in the same stored terms as their EvalJudgement. Kept apart, so the round's results
    count each reviewer's rating of an item once; read for the reviewer's self-consistency."""

    assignment = models.OneToOneField(
        EvalAssignment, on_delete=models.CASCADE, related_name="repeat_judgement"
    )
    preference = models.CharField(max_length=3, choices=EvalJudgement.Preference.choices)
    usefulness = models.PositiveSmallIntegerField()
    elapsed_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(usefulness__gte=1, usefulness__lte=5),
                name="eval_repeat_usefulness_1_to_5",
            )
        ]

    def __str__(self) -> str:
        return f"{self.assignment}: repeat {self.preference}, usefulness {self.usefulness}"


class StopDecision(models.Model):
    """A reviewer's decision on a run after looking at the stopping panel."""

    class Decision(models.TextChoices):
        STOP = "stop", "Stop training"
        CONTINUE = "continue", "Continue"
        ROLLBACK = "rollback", "Roll back to a checkpoint"
        REJECT = "reject", "Reject the run, keep the base model"

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="stop_decisions")
    round = models.ForeignKey(
        EvalRound, null=True, blank=True, on_delete=models.SET_NULL, related_name="decisions"
    )
    decision = models.CharField(max_length=8, choices=Decision.choices)
    checkpoint = models.ForeignKey(
        "training.Checkpoint",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The checkpoint rolled back to.",
    )
    note = models.TextField(blank=True)
    estimate_source = models.CharField(
        max_length=5,
        blank=True,
        choices=[("human", "Human-only"), ("ppi", "Prediction-powered")],
        help_text="Which estimate of the round backed the decision (blank: no rated round).",
    )
    estimate = models.JSONField(
        default=dict,
        blank=True,
        help_text="The estimates the panel showed: per metric source, estimate, low, high, n, "
        "reason; and the kappa threshold in force.",
    )
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(decision="rollback") | models.Q(checkpoint__isnull=False),
                name="stop_decision_rollback_names_checkpoint",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.decision}"


class StoppingPanelFigures(models.Model):
    """A run's stopping-panel figures as the task last computed them
    (``monitoring.selectors.stopping_panel.stopping_panel_figures``): the page reads these instead
    of re-running the bootstraps. ``fingerprint`` is what they were computed from
    (``stopping_panel_fingerprint``); another one now means they are out of date."""

    run = models.OneToOneField(
        TrainingRun, on_delete=models.CASCADE, related_name="stopping_figures"
    )
    payload = models.JSONField(help_text="The figures (JSON; NaN stored as null).")
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the inputs.")
    version = models.PositiveSmallIntegerField(help_text="The payload's layout version.")
    computed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"run {self.run_id}: stopping figures of {self.computed_at:%Y-%m-%d %H:%M}"


# --- Model judges ------------------------------------------------------------------------------------


class Judge(models.Model):
    """One version of a named model judge of a project, and the state of its job.

    A version never changes once created: editing a judge (its template, its tie band) creates the
    next version, with its own machine annotator, so its verdicts never overwrite the last ones.
    The job judges every comparison of the project in both orders (``JudgeOutput``) and stores the
    combined verdict per comparison as a ``Judgement`` of ``annotator``. An imported judge has no
    job: its verdicts come from a file (``judge_verdicts_import``), its ``description`` says whose
    they are and where they come from.
    """

    class Kind(models.TextChoices):
        REWARD_MODEL = "reward_model", "Reward model (score difference)"
        LOCAL_LLM = "local_llm", "Local LLM (judging prompt)"
        OPENAI = "openai", "OpenAI-compatible endpoint (judging prompt)"
        IMPORTED = "imported", "Imported verdicts (from a file)"

    class Status(models.TextChoices):
        DRAFT = "draft", "Not run yet"
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    project = models.ForeignKey(
        "annotation.Project", on_delete=models.CASCADE, related_name="judges"
    )
    name = models.SlugField(max_length=60)
    version = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    reward_run = models.ForeignKey(
        TrainingRun,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="judges",
        help_text="reward_model: the succeeded reward-model run whose scores decide.",
    )
    tie_band = models.FloatField(
        null=True,
        blank=True,
        help_text="reward_model: |r(A) - r(B)| at or below this is a tie (reward units); "
        "empty: calibrated on the humans' labels when the job runs.",
    )
    tie_band_kappa = models.FloatField(
        null=True,
        blank=True,
        help_text="Cohen's kappa with the humans the calibrated band reached.",
    )
    model_name = models.CharField(
        max_length=100,
        blank=True,
        help_text="local_llm: the registry name of the generative model; openai: the served "
        "model's name.",
    )
    template = models.TextField(blank=True, help_text="local_llm, openai: the judging prompt.")
    description = models.TextField(
        blank=True,
        help_text="imported: whose verdicts these are and where they come from (provenance).",
    )
    source_name = models.CharField(
        max_length=255, blank=True, help_text="imported: the name of the file imported."
    )
    max_new_tokens = models.PositiveIntegerField(default=256)
    endpoint_url = models.CharField(
        max_length=500,
        blank=True,
        help_text="openai: the base URL of the OpenAI-compatible API, e.g. http://host:8000/v1.",
    )
    api_key_env = models.CharField(
        max_length=100,
        blank=True,
        help_text="openai: the NAME of the worker's environment variable holding the API key "
        "(the key itself is never stored); empty sends no key.",
    )
    max_concurrency = models.PositiveSmallIntegerField(
        default=4, help_text="openai: requests in flight at once."
    )
    timeout_s = models.FloatField(default=60.0, help_text="openai: per-request timeout, seconds.")
    annotator = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="machine_judge",
        help_text="The machine account the verdicts are stored under (cannot log in).",
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT)
    done = models.PositiveIntegerField(default=0, help_text="(comparison, order) verdicts stored.")
    total = models.PositiveIntegerField(default=0, help_text="2 x the project's comparisons.")
    error = models.TextField(blank=True)
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["project", "name", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name", "version"], name="judge_version_once"
            ),
            models.CheckConstraint(
                condition=(models.Q(kind="reward_model") & models.Q(reward_run__isnull=False))
                | (models.Q(kind="local_llm") & ~models.Q(model_name="") & ~models.Q(template=""))
                | (
                    models.Q(kind="openai")
                    & ~models.Q(model_name="")
                    & ~models.Q(template="")
                    & ~models.Q(endpoint_url="")
                )
                | (models.Q(kind="imported") & ~models.Q(description="")),
                name="judge_kind_has_its_model",
            ),
            models.CheckConstraint(
                condition=models.Q(tie_band__isnull=True) | models.Q(tie_band__gte=0),
                name="judge_tie_band_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version} ({self.project.slug})"


class JudgeOutput(models.Model):
    """The judge's answer on one comparison in one order: ``shown_first`` is the stored response it
    saw as "Response A". ``verdict`` is in stored terms (a, b or tie), blank when the answer could
    not be parsed (``parse_error`` says why); ``raw`` is the answer as generated (for a reward model
    its two scores as JSON; for an imported verdict the label as the file gave it).

    An imported judge's file may give only the verdict its source combined from both orders:
    ``shown_first`` is then blank (one such row per comparison, never beside per-order rows), and
    ``orders_disagree`` marks a source's "inconsistent across orders" (its verdict a tie)."""

    judge = models.ForeignKey(Judge, on_delete=models.CASCADE, related_name="outputs")
    comparison = models.ForeignKey(
        "annotation.Comparison", on_delete=models.CASCADE, related_name="judge_outputs"
    )
    shown_first = models.CharField(
        max_length=1,
        blank=True,
        choices=[("a", "A first"), ("b", "B first"), ("", "Both orders, combined by the source")],
    )
    raw = models.TextField(blank=True)
    verdict = models.CharField(
        max_length=3, blank=True, choices=[("a", "A better"), ("b", "B better"), ("tie", "Tie")]
    )
    orders_disagree = models.BooleanField(
        default=False,
        help_text="imported, both orders combined: the source says the two orders disagreed.",
    )
    parse_error = models.CharField(max_length=300, blank=True)
    usefulness = models.FloatField(null=True, blank=True)
    score_diff = models.FloatField(
        null=True, blank=True, help_text="reward_model: r(A) - r(B) of the stored responses."
    )
    seconds = models.FloatField(help_text="Wall time spent on this answer (its share of a batch).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["judge", "comparison", "shown_first"]
        constraints = [
            models.UniqueConstraint(
                fields=["judge", "comparison", "shown_first"], name="judge_output_once_per_order"
            ),
            models.CheckConstraint(
                condition=models.Q(verdict="") ^ models.Q(parse_error=""),
                name="judge_output_verdict_or_error",
            ),
            models.CheckConstraint(
                condition=models.Q(orders_disagree=False)
                | (models.Q(shown_first="") & models.Q(verdict="tie")),
                name="judge_output_disagreement_is_a_combined_tie",
            ),
        ]

    def __str__(self) -> str:
        order = f"{self.shown_first} first" if self.shown_first else "both orders"
        return f"{self.judge} on {self.comparison_id} ({order}): {self.verdict or '?'}"


class EvalJudgeVerdict(models.Model):
    """A round's judge on one item in one order: ``shown_first`` is the side it saw as "Response
    A". ``preference`` as a reviewer's (a = the checkpoint better, b = the baseline, tie), blank
    when the answer could not be parsed (``parse_error`` says why); ``usefulness``: the judge's 1-5
    rating of the checkpoint's response (only in the checkpoint-first order, and only when its
    template asks); ``raw``: the answer as generated (a reward model: its two scores as JSON)."""

    item = models.ForeignKey(EvalItem, on_delete=models.CASCADE, related_name="judge_verdicts")
    judge = models.ForeignKey(Judge, on_delete=models.CASCADE, related_name="round_verdicts")
    shown_first = models.CharField(max_length=10, choices=EvalAssignment.Side.choices)
    preference = models.CharField(
        max_length=3, blank=True, choices=EvalJudgement.Preference.choices
    )
    usefulness = models.FloatField(null=True, blank=True)
    raw = models.TextField(blank=True)
    parse_error = models.CharField(max_length=300, blank=True)
    score_diff = models.FloatField(
        null=True, blank=True, help_text="reward_model: r(checkpoint) - r(baseline)."
    )
    seconds = models.FloatField(help_text="Wall time spent on this answer (its share of a batch).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["item", "shown_first"]
        constraints = [
            models.UniqueConstraint(
                fields=["item", "judge", "shown_first"], name="eval_judge_verdict_once_per_order"
            ),
            models.CheckConstraint(
                condition=models.Q(preference="") ^ models.Q(parse_error=""),
                name="eval_judge_verdict_or_error",
            ),
            models.CheckConstraint(
                condition=models.Q(usefulness__isnull=True)
                | models.Q(usefulness__gte=1, usefulness__lte=5),
                name="eval_judge_usefulness_1_to_5",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.judge} on {self.item} ({self.shown_first} first): {self.preference or '?'}"
