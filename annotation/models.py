"""The annotation domain: projects, prompts, responses, comparisons and annotators' judgements.

Invariants live in the schema: one judgement per (comparison, annotator), strength and overlap in range,
a comparison never sets a response against itself, content hashes make re-imports idempotent.

Long module: one app's models stay in one file (Django's convention; migrations and the admin read
them together), each model with its constraints next to it.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.search import SearchVectorField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from common.lifecycle import JobStatus


class Choice(models.TextChoices):
    """An annotator's verdict on a comparison, in terms of the stored responses (not screen sides)."""

    A = "a", "Response A is better"
    B = "b", "Response B is better"
    TIE = "tie", "About the same"
    BOTH_BAD = "both_bad", "Both are bad"


class Side(models.TextChoices):
    """Which stored response was shown on the left of the screen."""

    A = "a", "A on the left"
    B = "b", "B on the left"


# The stored pair a labelling screen shows, in common.sides' (first, second) order.
SCREEN_PAIR = (Side.A, Side.B)


MAX_STRENGTH = 3
MAX_OVERLAP = 20


class QueueOrder(models.TextChoices):
    """What orders a project's labelling queue (annotation.acquisition's strategies)."""

    BALANCED = "balanced", "Cluster-balanced"
    DISAGREEMENT = "disagreement", "Ensemble disagreement"
    UNCERTAINTY = "uncertainty", "Closeness to 50/50"
    JUDGE_DISAGREEMENT = "judge_disagreement", "Judge vs ensemble disagreement"


class TaskType(models.TextChoices):
    """What an annotator does with one item of a project (annotation.work_queue's plug-ins)."""

    PAIRWISE = "pairwise", "Pairwise (pick the better of two)"
    RATING = "rating", "Rating (scores per aspect and/or thumbs, one response)"
    RANKING = "ranking", "Ranking (order 3-8 responses)"


# Rating aspects are scored on this closed scale (HelpSteer2's and UltraFeedback's 1-5, after
# HelpSteer2's 0-4 is shifted by one on import).
RATING_SCALE = (1, 5)
MIN_RANKED, MAX_RANKED = 3, 8


class Project(models.Model):
    """A labelling project: its guidelines, how many annotators judge each pair, what verdicts exist."""

    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    guidelines = models.TextField(blank=True, help_text="Markdown shown to annotators.")
    overlap = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_OVERLAP)],
        help_text="Distinct annotators who judge each comparison.",
    )
    allow_ties = models.BooleanField(default=True)
    allow_both_bad = models.BooleanField(default=False)
    strength_scale = models.PositiveSmallIntegerField(
        default=MAX_STRENGTH,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_STRENGTH)],
        help_text="Levels of preference strength offered (1 = no strength, 3 = slight/clear/much).",
    )
    lease_minutes = models.PositiveSmallIntegerField(
        default=30,
        validators=[MinValueValidator(1)],
        help_text="Minutes an annotator holds a claimed comparison before it returns.",
    )
    gold_every = models.PositiveSmallIntegerField(
        default=10,
        help_text="Mix a gold item (known answer) into every Nth pair an annotator gets; 0 = never.",
    )
    repeat_every = models.PositiveSmallIntegerField(
        default=25,
        help_text="Show an already judged pair again, sides flipped, every Nth pair; 0 = never.",
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        related_name="annotation_projects",
        blank=True,
        through="ProjectMembership",
        through_fields=("project", "user"),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    archived_at = models.DateTimeField(
        null=True, blank=True, help_text="Set when archived: no new claims; the data are kept."
    )
    suggestion_judge = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name="Suggestions from",
        help_text="Off when empty. A trusted model judge of this project whose verdict the labelling "
        "screen pre-selects (marked as its suggestion); annotators confirm or change it.",
    )
    queue_order = models.CharField(
        max_length=20,
        choices=QueueOrder.choices,
        default=QueueOrder.BALANCED,
        help_text="How the labelling queue is ordered: cluster-balanced, or by an acquisition score "
        "of the latest reward-model ensemble (still cluster-balanced, with an exploration share).",
    )
    exploration_share = models.FloatField(
        default=0.2,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="With an acquisition order: the share of the queue placed at random (0 to 1).",
    )
    overlap_reduction = models.BooleanField(
        default=False,
        help_text="Give one annotator (instead of the overlap) to comparisons on which the latest "
        "reward-model ensemble and the trusted judge agree with high confidence.",
    )
    task_type = models.CharField(
        max_length=10,
        choices=TaskType.choices,
        default=TaskType.PAIRWISE,
        help_text="Pairwise comparisons, ratings of one response, or rankings of 3-8 responses.",
    )
    rating_aspects = models.JSONField(
        default=list,
        blank=True,
        help_text='Rating projects: the aspects scored 1-5, e.g. ["helpfulness", "correctness"].',
    )
    rating_thumbs = models.BooleanField(
        default=False, help_text="Rating projects: ask for a thumbs up or down (KTO labels)."
    )
    continuous_rm = models.BooleanField(
        default=False,
        verbose_name="Continuous reward modelling",
        help_text="Retrain a reward-model ensemble from the consensus every N new judgements.",
    )
    continuous_rm_every = models.PositiveIntegerField(
        default=50,
        validators=[MinValueValidator(1)],
        verbose_name="Retrain every N judgements",
    )
    continuous_rm_ensemble_size = models.PositiveSmallIntegerField(
        default=5,
        validators=[MinValueValidator(1), MaxValueValidator(16)],
        verbose_name="Ensemble size",
        help_text="Members of the continuously retrained reward ensemble (shared encoder, K heads).",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(overlap__gte=1, overlap__lte=MAX_OVERLAP), name="project_overlap_range"
            ),
            models.CheckConstraint(
                condition=Q(strength_scale__gte=1, strength_scale__lte=MAX_STRENGTH),
                name="project_strength_scale_range",
            ),
            models.CheckConstraint(
                condition=Q(exploration_share__gte=0.0, exploration_share__lte=1.0),
                name="project_exploration_share_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None


class ProjectMembership(models.Model):
    """A user's place in a project: annotator (labels) or reviewer, and whether they are paused.

    The table is the one Django made for ``Project.members`` before it had a through model, so a
    plain ``project.members.add(user)`` still makes an annotator. A paused annotator claims no pairs.
    """

    class Role(models.TextChoices):
        ANNOTATOR = "annotator", "Annotator"
        REVIEWER = "reviewer", "Reviewer"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="project_memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.ANNOTATOR)
    paused_at = models.DateTimeField(null=True, blank=True)
    added_at = models.DateTimeField(default=timezone.now)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        db_table = "annotation_project_members"
        unique_together = [("project", "user")]
        constraints = [
            models.CheckConstraint(
                condition=Q(role__in=["annotator", "reviewer"]), name="membership_role_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project.slug} ({self.role})"


class ProjectEvent(models.Model):
    """One audited change to a project's settings or people: who, when, what, before and after.

    ``changes`` maps a field to ``{"before": ..., "after": ...}`` for edits; ``{}`` otherwise.
    ``subject`` is the member concerned by a membership event (blank for project events).
    """

    class Kind(models.TextChoices):
        CREATED = "created", "Project created"
        EDITED = "edited", "Settings edited"
        ARCHIVED = "archived", "Archived"
        UNARCHIVED = "unarchived", "Unarchived"
        MEMBER_ADDED = "member_added", "Member added"
        MEMBER_REMOVED = "member_removed", "Member removed"
        MEMBER_PAUSED = "member_paused", "Member paused"
        MEMBER_RESUMED = "member_resumed", "Member resumed"
        INVITED = "invited", "Account created with an invite link"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    subject = models.CharField(max_length=150, blank=True, help_text="The member's username.")
    changes = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-id"], name="project_event_newest")]

    def __str__(self) -> str:
        return f"{self.project.slug}: {self.kind} {self.subject}".rstrip()


class Prompt(models.Model):
    """A prompt: plain text, or a multi-turn conversation ending with the user's turn."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="prompts")
    text = models.TextField(help_text="The prompt, or the last user turn of a conversation.")
    messages = models.JSONField(
        null=True, blank=True, help_text="[{role, content}, ...] for a multi-turn conversation."
    )
    content_hash = models.CharField(max_length=64)
    metadata = models.JSONField(default=dict, blank=True)
    cluster = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_hash"], name="prompt_unique_content"
            )
        ]

    def __str__(self) -> str:
        return self.text[:80]


class Response(models.Model):
    """One model's response to a prompt."""

    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="responses")
    text = models.TextField()
    model_name = models.CharField(max_length=200, blank=True)
    content_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["prompt", "content_hash"], name="response_unique_content"
            )
        ]

    def __str__(self) -> str:
        return f"{self.model_name or 'response'}: {self.text[:60]}"


class Comparison(models.Model):
    """A pair of responses to one prompt, to be judged by ``project.overlap`` annotators."""

    # indexed with the id (``comparison_project_order`` below), not on its own
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="comparisons", db_index=False
    )
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="comparisons")
    response_a = models.ForeignKey(Response, on_delete=models.PROTECT, related_name="+")
    response_b = models.ForeignKey(Response, on_delete=models.PROTECT, related_name="+")
    gold = models.CharField(max_length=8, choices=Choice.choices, blank=True)
    external_id = models.CharField(max_length=200, blank=True)
    content_hash = models.CharField(max_length=64)
    metadata = models.JSONField(default=dict, blank=True)
    queue_position = models.BigIntegerField(
        default=0,
        db_index=True,
        help_text="Order in which pairs are handed out (batches; cluster-balanced when clustered).",
    )
    taken = models.PositiveSmallIntegerField(
        default=0, help_text="Active leases plus judgements: slots of the overlap already taken."
    )
    served = models.PositiveIntegerField(
        default=0, help_text="Times handed out; its parity alternates the side shown on the left."
    )
    ensemble_preference = models.FloatField(
        null=True,
        blank=True,
        help_text="The latest reward-model ensemble's P(A > B) (mean of its members' sigmoids).",
    )
    ensemble_disagreement = models.FloatField(
        null=True, blank=True, help_text="The ensemble members' std of r_A - r_B (reward units)."
    )
    target_overlap = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Annotators this comparison needs when overlap reduction lowered it (>= 1); "
        "empty: the project's overlap.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["project", "queue_position", "id"], name="comparison_queue"),
            # a project's comparisons in id order, read from the index alone: the item browser's
            # filters that are anti- or semi-joins on the id (status open, a margin band, search)
            # walk it beside the other table's key instead of every comparison's row
            models.Index(fields=["project", "id"], name="comparison_project_order"),
            # the item browser's gold filter: 1 comparison in hundreds, found without a walk
            models.Index(fields=["project", "id"], condition=~Q(gold=""), name="comparison_gold"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_hash"], name="comparison_unique_content"
            ),
            models.CheckConstraint(
                condition=~Q(response_a=F("response_b")), name="comparison_distinct_responses"
            ),
            models.CheckConstraint(
                condition=Q(target_overlap__isnull=True) | Q(target_overlap__gte=1),
                name="comparison_target_overlap_at_least_one",
            ),
        ]

    def __str__(self) -> str:
        return f"comparison {self.pk} ({self.project.slug})"


class ComparisonSearch(models.Model):
    """A comparison's search documents, for the item browser's search on PostgreSQL: the English
    ``tsvector`` of its prompt and of each response, kept by database triggers (migration
    ``0010_comparison_search_documents``: on every insert of comparisons, the import's set-based
    ones included, each distinct text's document computed once per statement since ``0022``, and
    when a comparison's texts change) and searched through one GIN index. Each
    text has its own document, so a comparison matches when one of its texts satisfies the query
    on its own, as the search has always read. Empty on SQLite, which searches with contains."""

    comparison = models.OneToOneField(
        Comparison, primary_key=True, on_delete=models.CASCADE, related_name="search"
    )
    prompt_document = SearchVectorField(null=True)
    a_document = SearchVectorField(null=True)
    b_document = SearchVectorField(null=True)

    def __str__(self) -> str:
        return f"search documents of comparison {self.comparison_id}"


class Judgement(models.Model):
    """An annotator's verdict on a comparison. At most one per annotator and comparison."""

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="judgements")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="judgements"
    )
    choice = models.CharField(max_length=8, choices=Choice.choices)
    strength = models.PositiveSmallIntegerField(
        default=1, help_text="1 = slightly better ... 3 = much better (1 for ties)."
    )
    rationale = models.TextField(blank=True)
    shown_left = models.CharField(
        max_length=1,
        choices=Side.choices,
        blank=True,
        help_text="Which response the annotator saw on the left (blank: unknown, e.g. imported).",
    )
    elapsed_ms = models.PositiveIntegerField(
        null=True, blank=True, help_text="Time from display to submit, in milliseconds."
    )
    guidelines_version = models.ForeignKey(
        "GuidelinesVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="judgements",
        help_text="The guidelines in force when it was made (empty: before versioning, or imported).",
    )
    suggested_choice = models.CharField(
        max_length=8,
        choices=Choice.choices,
        blank=True,
        help_text="The model judge's verdict the screen pre-selected when it was made, in stored "
        "terms (blank: no suggestion shown).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["comparison", "annotator"], name="judgement_one_per_annotator"
            ),
            models.CheckConstraint(
                condition=Q(suggested_choice__in=[*(c.value for c in Choice), ""]),
                name="judgement_suggested_choice_valid",
            ),
            models.CheckConstraint(
                condition=Q(strength__gte=1, strength__lte=MAX_STRENGTH),
                name="judgement_strength_range",
            ),
            models.CheckConstraint(
                condition=Q(choice__in=[c.value for c in Choice]), name="judgement_choice_valid"
            ),
            models.CheckConstraint(
                condition=Q(shown_left__in=[*(s.value for s in Side), ""]),
                name="judgement_side_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.annotator} on {self.comparison_id}: {self.choice}"


class Assignment(models.Model):
    """A comparison handed to an annotator: a lease until ``expires_at``, then a record of the outcome.

    ``kind`` is a normal pair, a gold item (judged by everyone, not counted against the overlap) or a
    swap repeat (a pair the annotator already judged, shown again with the sides flipped).
    """

    class Kind(models.TextChoices):
        NORMAL = "normal", "Normal"
        GOLD = "gold", "Gold item"
        REPEAT = "repeat", "Swap repeat"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        DONE = "done", "Judged"
        SKIPPED = "skipped", "Skipped"

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assignments"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.NORMAL)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.ACTIVE)
    shown_left = models.CharField(max_length=1, choices=Side.choices)
    claimed_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["comparison", "annotator", "kind"], name="assignment_once_per_kind"
            ),
            models.CheckConstraint(
                condition=Q(shown_left__in=[s.value for s in Side]), name="assignment_side_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "expires_at"], name="assignment_expiry"),
            # the item browser's live-lease test per comparison (status open, in progress): the
            # few active rows only, not a comparison's finished assignments
            models.Index(
                fields=["comparison", "expires_at"],
                condition=Q(status="active"),
                name="assignment_active_lease",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.annotator} <- {self.comparison_id} ({self.kind}, {self.status})"


class RepeatJudgement(models.Model):
    """The second verdict on a swap repeat: the same annotator, the same pair, sides flipped."""

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="repeats")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="repeat_judgements"
    )
    choice = models.CharField(max_length=8, choices=Choice.choices)
    strength = models.PositiveSmallIntegerField(default=1)
    shown_left = models.CharField(max_length=1, choices=Side.choices)
    elapsed_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["comparison", "annotator"], name="repeat_one_per_annotator"
            ),
            models.CheckConstraint(
                condition=Q(strength__gte=1, strength__lte=MAX_STRENGTH),
                name="repeat_strength_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.annotator} repeat on {self.comparison_id}: {self.choice}"


class ImportJob(models.Model):
    """An uploaded JSONL file and the progress of its import (the upload page polls this).

    Its ``status`` follows the one job lifecycle (``common.lifecycle``); while it runs, the phase
    (validating, importing) and the row counts live in the shared cache."""

    Status = JobStatus

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="import_jobs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    path = models.CharField(max_length=500, help_text="The uploaded file, kept as received.")
    original_name = models.CharField(max_length=255)
    size_bytes = models.BigIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    rows_total = models.PositiveIntegerField(null=True, blank=True)
    rows_done = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True)
    result = models.JSONField(default=dict, blank=True)
    cancel_requested = models.BooleanField(
        default=False,
        help_text="Set while it runs to stop it (and roll it back) at its next progress report.",
    )
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"import of {self.original_name} into {self.project.slug} ({self.status})"


class DatasetExport(models.Model):
    """An immutable, hashed export of a project's preferences (what a training run names).

    The files live under ``folder``: ``pairs.jsonl`` (TRL-style prompt/chosen/rejected with margin and
    provenance) and ``judgements.jsonl`` (raw per-annotator rows). ``sha256`` covers both files. A
    rating or ranking project's export (annotation.services.item_exports) holds its data file
    (``options["data_file"]``, rows of kind ``options["rows"]``) and ``items.jsonl`` instead;
    ``n_pairs`` counts its rows and ``n_judgements`` its answers.
    """

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="exports")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    sha256 = models.CharField(max_length=64, unique=True)
    folder = models.CharField(max_length=500)
    options = models.JSONField(default=dict)
    n_pairs = models.PositiveIntegerField()
    n_judgements = models.PositiveIntegerField()
    n_ties_dropped = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.project.slug}@{self.sha256[:12]}"


class ExportJob(models.Model):
    """A training export made on the worker (annotation.services.export_jobs), and its progress.

    ``options`` are what the export was asked for: a pairwise project's ``consensus``,
    ``keep_ties``, ``min_judgements`` (and ``fallback`` with the adjudicated rule), or a rating or
    ranking project's ``format`` (its training rows). ``build_hf``: also build the export's Hugging
    Face dataset zip (pairwise only). A job queued with ``export`` set only builds that export's
    zip; otherwise ``export`` is the DatasetExport the job produced (an identical earlier export
    when the content is the same). Its ``status`` follows the one job lifecycle
    (``common.lifecycle``); while it runs, ``phase`` and the row counts (judged comparisons while
    exporting, pairs while building the zip) are written at most once a second, and a job whose
    ``cancel_requested`` was set stops at the next of those writes."""

    Status = JobStatus

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="export_jobs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    options = models.JSONField(default=dict, blank=True)
    build_hf = models.BooleanField(
        default=False, help_text="Also build the Hugging Face dataset zip (pairwise only)."
    )
    export = models.ForeignKey(
        DatasetExport,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="jobs",
        help_text="The export made (or, set when queued, the export whose zip the job builds).",
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    phase = models.CharField(max_length=40, blank=True)
    rows_done = models.PositiveIntegerField(default=0)
    rows_total = models.PositiveIntegerField(null=True, blank=True)
    rows_per_s = models.PositiveIntegerField(null=True, blank=True)
    eta_s = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds left, about.")
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(
        default=False, help_text="Set while it runs to stop it at its next progress write."
    )
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"export job {self.pk} of {self.project.slug} ({self.status})"


class PromptEmbedding(models.Model):
    """A prompt's sentence embedding under one model: ``dim`` float32 values, little-endian bytes.

    ``text_hash`` is the sha256 of the text that was embedded, so a prompt whose embedded text changes
    is embedded again, and one that did not change never is.
    """

    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="embeddings")
    model_name = models.CharField(max_length=100)
    text_hash = models.CharField(max_length=64)
    dim = models.PositiveSmallIntegerField()
    vector = models.BinaryField(help_text="float32 little-endian, dim * 4 bytes.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["prompt", "model_name"], name="embedding_one_per_prompt_and_model"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model_name} embedding of prompt {self.prompt_id}"


class ClusteringRun(models.Model):
    """One clustering of a project's prompts: its state while it runs, then its result.

    At most one run per project is queued or running. The latest succeeded run is the project's
    current clustering; its labels are copied to ``Prompt.cluster``. ``projection`` holds the 2-D
    PCA coordinates for the scatter plot: {"prompt_ids": [...], "labels": [...], "x": [...], "y": [...]}.
    """

    Status = JobStatus

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="clustering_runs")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    model_name = models.CharField(max_length=100)
    k_requested = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Clusters asked for; empty: chosen by silhouette."
    )
    k = models.PositiveSmallIntegerField(null=True, blank=True)
    silhouette = models.FloatField(null=True, blank=True)
    silhouette_by_k = models.JSONField(default=dict, blank=True)
    n_prompts = models.PositiveIntegerField(default=0)
    n_embedded = models.PositiveIntegerField(default=0, help_text="Prompts embedded by this run.")
    progress = models.FloatField(default=0.0, help_text="0 to 1.")
    stage = models.CharField(max_length=200, blank=True)
    projection = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project"],
                condition=Q(status__in=["queued", "running"]),
                name="clustering_one_active_run_per_project",
            ),
            models.CheckConstraint(
                condition=Q(progress__gte=0.0, progress__lte=1.0), name="clustering_progress_range"
            ),
        ]

    def __str__(self) -> str:
        return f"clustering {self.pk} of {self.project.slug} ({self.status})"


class PromptCluster(models.Model):
    """One cluster of a clustering run: its size, top terms, most central prompts and a name."""

    run = models.ForeignKey(ClusteringRun, on_delete=models.CASCADE, related_name="clusters")
    label = models.PositiveSmallIntegerField(help_text="The value stored in Prompt.cluster.")
    name = models.CharField(max_length=100, blank=True)
    size = models.PositiveIntegerField()
    share = models.FloatField(help_text="size / prompts in the run.")
    top_terms = models.JSONField(default=list, blank=True)
    central_prompt_ids = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["run", "label"]
        constraints = [
            models.UniqueConstraint(fields=["run", "label"], name="cluster_label_unique_per_run"),
        ]

    def __str__(self) -> str:
        return self.name or f"cluster {self.label}"


class GuidelinesVersion(models.Model):
    """One version of a project's guidelines: numbered from 1 per project, never changed afterwards.

    The newest version's text is the project's ``guidelines``; each new Judgement points at the
    version in force when it was made (annotation.services.adjudication.guidelines_update).
    """

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="guidelines_versions"
    )
    number = models.PositiveIntegerField()
    text = models.TextField(blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "number"], name="guidelines_version_unique_number"
            ),
            models.CheckConstraint(condition=Q(number__gte=1), name="guidelines_version_from_one"),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug} guidelines v{self.number}"


class GuidelinesSeen(models.Model):
    """The newest guidelines version an annotator was shown the "guidelines changed" notice for."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    number = models.PositiveIntegerField()
    seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "annotator"], name="guidelines_seen_one_per_annotator"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.annotator} saw v{self.number} of {self.project_id}"


class Flag(models.Model):
    """An annotator's flag on a pair from the labelling screen; it puts the pair in the adjudication
    queue until an adjudication settles it (flags are kept: they are the pair's history)."""

    class Reason(models.TextChoices):
        UNCLEAR = "unclear", "Unclear"
        HARMFUL = "harmful", "Harmful content"
        BROKEN = "broken", "Broken"

    comparison = models.ForeignKey(Comparison, on_delete=models.CASCADE, related_name="flags")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="annotation_flags"
    )
    reason = models.CharField(max_length=8, choices=Reason.choices)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["comparison", "annotator", "reason"], name="flag_once_per_reason"
            ),
            models.CheckConstraint(
                condition=Q(reason__in=["unclear", "harmful", "broken"]), name="flag_reason_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.annotator} flagged {self.comparison_id}: {self.reason}"


class Adjudication(models.Model):
    """A final verdict on a comparison, recorded apart from the annotators' judgements.

    At most one per comparison is current (``superseded_at`` empty); a re-adjudication stamps the
    current one superseded and adds a new row pointing at it (``supersedes``), so the history of who
    decided what, when and why is kept.
    """

    comparison = models.ForeignKey(
        Comparison, on_delete=models.CASCADE, related_name="adjudications"
    )
    choice = models.CharField(max_length=8, choices=Choice.choices)
    note = models.TextField(blank=True)
    reasons = models.JSONField(default=list, blank=True, help_text="Why it was in the queue.")
    shown_left = models.CharField(
        max_length=1,
        choices=Side.choices,
        help_text="The response the adjudicator saw on the left.",
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="adjudications"
    )
    decided_at = models.DateTimeField(auto_now_add=True)
    supersedes = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    superseded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-decided_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["comparison"],
                condition=Q(superseded_at__isnull=True),
                name="adjudication_one_current_per_comparison",
            ),
            models.CheckConstraint(
                condition=Q(choice__in=[c.value for c in Choice]), name="adjudication_choice_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"adjudication of {self.comparison_id}: {self.choice}"


class LearningCurvePoint(models.Model):
    """One continuous reward-model retrain's held-out accuracy against the labels it learnt from
    (the project page's learning curve). ``run_id``: the training run (training app), by id."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="learning_curve")
    run_id = models.PositiveIntegerField()
    labels = models.PositiveIntegerField(help_text="Consensus pairs the retrain learnt from.")
    accuracy = models.FloatField(help_text="Held-out accuracy of the ensemble mean, 0 to 1.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["labels", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["project", "run_id"], name="curve_point_once_per_run")
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}: {self.labels} labels -> {self.accuracy:.3f}"


# --- Rating and ranking items -----------------------------------------------------------------------
# A pairwise project keeps its Comparison / Assignment / Judgement tables; these are the other task
# types'. Every lease and answer stores the display order the annotator saw: ``order[j]`` is the
# stored position (0-based, ``TaskItemResponse.position``) of the response shown in screen slot
# ``j``. Answers are stored in stored terms (``ranks[p]``: the rank, 1 = best, of the response at
# stored position ``p``), so the screen's order can be audited for position bias and never leaks
# into agreement or export.


class TaskItem(models.Model):
    """One rating or ranking item: a prompt and its responses in stored order (``positions``).

    ``gold``: the known answer of a gold item ({} for an ordinary item), in stored terms:
    ``{"scores": {aspect: int}, "thumbs": bool}`` for a rating, ``{"ranks": [int, ...]}`` for a
    ranking. ``taken`` = active normal leases + answers (never above the project's overlap);
    ``served``: how many times it was handed out (its display-order rotation).
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="task_items")
    prompt = models.ForeignKey(Prompt, on_delete=models.CASCADE, related_name="task_items")
    gold = models.JSONField(default=dict, blank=True)
    external_id = models.CharField(max_length=200, blank=True)
    content_hash = models.CharField(max_length=64)
    metadata = models.JSONField(default=dict, blank=True)
    queue_position = models.BigIntegerField(default=0)
    taken = models.PositiveSmallIntegerField(default=0)
    served = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_hash"], name="task_item_unique_content"
            )
        ]
        indexes = [models.Index(fields=["project", "queue_position", "id"], name="task_item_queue")]

    def __str__(self) -> str:
        return f"item {self.pk} of project {self.project_id}"


class TaskItemResponse(models.Model):
    """The response at stored position ``position`` (0-based) of an item."""

    item = models.ForeignKey(TaskItem, on_delete=models.CASCADE, related_name="positions")
    response = models.ForeignKey(Response, on_delete=models.PROTECT, related_name="+")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["item", "position"], name="task_item_position_once")
        ]

    def __str__(self) -> str:
        return f"item {self.item_id} position {self.position}"


class TaskLease(models.Model):
    """An item handed to an annotator (the work queue's claim), with the display order shown.

    ``kind``: normal (counted against the overlap), gold (everyone, outside the overlap) or repeat
    (an item the annotator answered a while ago, shown again in another order)."""

    Kind = Assignment.Kind
    Status = Assignment.Status

    item = models.ForeignKey(TaskItem, on_delete=models.CASCADE, related_name="leases")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="task_leases"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.NORMAL)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.ACTIVE)
    order = models.JSONField(help_text="Stored positions in screen order.")
    claimed_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["item", "annotator", "kind"], name="task_lease_once_per_kind"
            )
        ]
        indexes = [models.Index(fields=["status", "expires_at"], name="task_lease_expiry")]

    def __str__(self) -> str:
        return f"{self.annotator} <- item {self.item_id} ({self.kind}, {self.status})"


class TaskAnswer(models.Model):
    """An annotator's answer on an item, in stored terms, with the display order they saw.

    Rating: ``scores`` {aspect: 1-5} and/or ``thumbs`` (True = up). Ranking: ``ranks`` [K], the rank
    of the response at each stored position (1 = best; equal ranks are ties). ``repeat``: the second
    answer of a repeat (kept apart, as pairwise keeps RepeatJudgement apart)."""

    item = models.ForeignKey(TaskItem, on_delete=models.CASCADE, related_name="answers")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="task_answers"
    )
    repeat = models.BooleanField(default=False)
    gold = models.BooleanField(default=False, help_text="Answered as a gold item.")
    order = models.JSONField(help_text="Stored positions in the screen order shown.")
    scores = models.JSONField(default=dict, blank=True)
    thumbs = models.BooleanField(null=True, blank=True)
    ranks = models.JSONField(default=list, blank=True)
    rationale = models.TextField(blank=True)
    elapsed_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["item", "annotator", "repeat"], name="task_answer_one_per_annotator"
            )
        ]

    def __str__(self) -> str:
        return f"{self.annotator} on item {self.item_id}"


class ConsensusFit(models.Model):
    """A project's last full Dawid-Skene fit (``annotation.services.consensus.consensus_refit``):
    the log class priors (natural log, CHOICES order) and, in ``AnnotatorConfusion``, each
    annotator's confusion matrix. Between fits the stored consensus of a comparison whose votes
    change is recomputed in the database with these figures held fixed."""

    project = models.OneToOneField(
        Project, on_delete=models.CASCADE, primary_key=True, related_name="consensus_fit"
    )
    log_prior_a = models.FloatField()
    log_prior_b = models.FloatField()
    log_prior_tie = models.FloatField()
    log_prior_both_bad = models.FloatField()
    n_judgements = models.PositiveIntegerField(help_text="People's judgements the fit learnt from.")
    iterations = models.PositiveIntegerField()
    log_likelihood = models.FloatField()
    fingerprint = models.JSONField(
        default=list, help_text="The judgements' fingerprint when fitted (count, latest change)."
    )
    fitted_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"consensus fit of {self.project_id} ({self.n_judgements} judgements)"


class AnnotatorConfusion(models.Model):
    """One row of an annotator's fitted confusion matrix: log P(says ``said`` | true class k) for
    each k (natural log), from the project's last ``ConsensusFit``."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    said = models.CharField(max_length=8, choices=Choice.choices)
    log_a = models.FloatField()
    log_b = models.FloatField()
    log_tie = models.FloatField()
    log_both_bad = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "annotator", "said"], name="confusion_one_row_per_choice"
            )
        ]

    def __str__(self) -> str:
        return f"confusion of {self.annotator_id} in {self.project_id}, said {self.said}"


class StoredConsensus(models.Model):
    """A judged comparison's consensus, stored so the item browser filters by index (issue 30).

    People's votes only. Majority: ``majority_choice`` (blank when the top is shared: ``split``) and
    ``majority_margin`` (top vote share minus the runner-up's). Dawid-Skene: the posterior
    ``p_*`` from the project's ``ConsensusFit`` (uniform priors and no annotator information
    before the first fit), ``ds_choice`` (blank when the top is shared) and ``ds_margin``,
    P(chosen) - P(rejected) (0 for tie, both bad or undecided). On PostgreSQL triggers on
    judgements rewrite the rows of the comparisons a statement touched, in its transaction
    (migration 0012); a comparison without people's votes has no row.
    """

    comparison = models.OneToOneField(
        Comparison, on_delete=models.CASCADE, primary_key=True, related_name="stored_consensus"
    )
    # no index of its own: the indexes below lead with the project, and every index is one more
    # entry to write for each row a refit rewrites
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    n_votes = models.PositiveIntegerField()
    n_choices = models.PositiveSmallIntegerField()
    majority_choice = models.CharField(max_length=8, choices=Choice.choices, blank=True)
    majority_margin = models.FloatField()
    split = models.BooleanField()
    ds_choice = models.CharField(max_length=8, choices=Choice.choices, blank=True)
    ds_margin = models.FloatField()
    p_a = models.FloatField()
    p_b = models.FloatField()
    p_tie = models.FloatField()
    p_both_bad = models.FloatField()

    class Meta:
        indexes = [
            # the item browser's margin band, walked in comparison order beside the comparisons'
            # (project, id) index, the margin read from the index (a band's rows can all lie late
            # in the id order, where a walk of the table's rows cost 250 ms on 1M comparisons)
            models.Index(
                fields=["project", "comparison"], include=["ds_margin"], name="consensus_margin"
            ),
            models.Index(fields=["project", "n_votes", "n_choices"], name="consensus_votes"),
            models.Index(
                fields=["project", "comparison"], condition=Q(split=True), name="consensus_split"
            ),
        ]

    def __str__(self) -> str:
        return f"consensus of {self.comparison_id}: {self.majority_choice or 'split'}"
