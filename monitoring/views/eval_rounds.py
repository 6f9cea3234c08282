"""Human-eval pages: rounds (list and create), the blind reviewer screen, a round's results, the
decision on a run. Thin: check the role, validate the form, call a service or selector, render."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render

from annotation.models import Project
from annotation.work_queue.policy import REPEAT_MIN_DISTANCE
from annotation.work_queue.registry import task_type_named
from common.model_registry import registered_models
from common.roles import ML_ENGINEER, REVIEWER, role_required
from common.sides import screen_order, screen_side
from monitoring.eval_rating import EVAL_RATING_NAME
from monitoring.models import EVAL_PAIR, EvalAssignment, EvalRound, Judge, StopDecision
from monitoring.selectors import eval_repeats as repeat_selectors
from monitoring.selectors import eval_rounds as eval_selectors
from monitoring.selectors import prompts as prompt_selectors
from monitoring.selectors import round_judges as ppi_selectors
from monitoring.selectors.round_judges import DEFAULT_KAPPA_THRESHOLD
from monitoring.services import eval_rounds as eval_services
from monitoring.services import round_judges as round_judge_services
from monitoring.services.eval_rounds import MAX_REPEAT_EVERY, EvalError
from monitoring.services.round_judges import RoundJudgeError
from training.models import Checkpoint, TrainingRun


class PolicyCheckpointField(forms.ModelChoiceField):
    """Checkpoints of policy runs (every kind but the reward model), newest run first, by run
    name, kind and step."""

    def __init__(self, **kwargs) -> None:
        # Every kind the registry holds now (one registered later too) but the reward model,
        # whose checkpoint scores answers and cannot be judged.
        queryset = (
            Checkpoint.objects.exclude(run__kind=TrainingRun.Kind.RM)
            .select_related("run")
            .order_by("-run_id", "-step")
        )
        super().__init__(queryset=queryset, **kwargs)

    def label_from_instance(self, checkpoint: Checkpoint) -> str:
        run = checkpoint.run
        return f"{run.name} · {run.get_kind_display()} #{run.pk} · step {checkpoint.step}"


class RoundForm(forms.Form):
    checkpoint = PolicyCheckpointField(
        label="Checkpoint to evaluate",
        help_text="A checkpoint of a policy run (any kind but the reward model, which cannot be judged).",
    )
    project = forms.ModelChoiceField(
        queryset=Project.objects.order_by("name"),
        to_field_name="slug",
        label="Prompts from project",
        help_text="Its held-out prompts, drawn stratified by cluster.",
    )
    baseline_model = forms.ChoiceField(
        required=False,
        help_text="A generative model of the registry, or leave empty and pick a checkpoint below.",
    )
    baseline_checkpoint = PolicyCheckpointField(
        required=False, label="Or a baseline checkpoint", help_text="An earlier checkpoint."
    )
    size = forms.IntegerField(
        min_value=1, max_value=5000, initial=100, label="Prompts",
        help_text="Prompts in the round; the interval width they give is shown as you type.",
    )  # fmt: skip
    repeat_every = forms.IntegerField(
        min_value=0,
        max_value=MAX_REPEAT_EVERY,
        initial=0,
        required=False,
        label="Repeat every n-th item",
        help_text="Each reviewer's n-th item is one they rated at least "
        f"{REPEAT_MIN_DISTANCE} items before, sides flipped: it measures their self-consistency "
        "and is not counted twice in the results. 0: no repeats.",
    )
    ci_width = forms.FloatField(
        min_value=0.01,
        max_value=0.9,
        initial=0.1,
        label="Wanted win-rate interval width",
        help_text="The page says how many prompts that width needs (385 for 0.1).",
    )
    max_new_tokens = forms.IntegerField(
        min_value=1, max_value=4096, initial=256, help_text="Longest answer, in tokens."
    )
    judge = forms.ModelChoiceField(
        queryset=Judge.objects.select_related("project").order_by(
            "project__slug", "name", "-version"
        ),
        required=False,
        label="Judge (optional)",
        help_text="A model judge of the same project rates every item; reviewers then rate only "
        "a random share of them, and the results add a prediction-powered interval.",
    )
    human_fraction = forms.FloatField(
        min_value=0.01,
        max_value=1,
        initial=1.0,
        required=False,
        label="Share of items for reviewers",
        help_text="With a judge: the random share of the items reviewers rate (at least 20 "
        "items, or all); 1 sends them every item.",
    )
    endpoint_url = forms.CharField(
        required=False,
        max_length=500,
        label="Serving endpoint (optional)",
        help_text="Empty: generate on the gpu worker. Or the base URL of an OpenAI-compatible "
        "server (vLLM, SGLang, llama.cpp) serving both models, e.g. http://vllm-host:8000/v1.",
    )
    checkpoint_served_model = forms.CharField(
        required=False, max_length=200, help_text="Endpoint: the checkpoint's served name."
    )
    baseline_served_model = forms.CharField(
        required=False, max_length=200, help_text="Endpoint: the baseline's served name."
    )
    baseline_endpoint_url = forms.CharField(
        required=False,
        max_length=500,
        label="Baseline endpoint URL",
        help_text="Endpoint: another server's base URL for the baseline, if not the same one.",
    )
    api_key_env = forms.CharField(
        required=False,
        max_length=100,
        label="API key variable",
        help_text="Endpoint: the NAME of the worker's environment variable holding the key.",
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        generative = [m for m in registered_models() if m.family == "causal-lm"]
        self.fields["baseline_model"].choices = [("", "(a checkpoint, chosen below)")] + [
            (m.name, m.name if m.ready else f"{m.name} (not fetched: {m.how_to_get})")
            for m in generative
        ]
        self.fields["size"].widget.attrs["data-interval-width"] = "win-rate"
        for name in ("checkpoint", "baseline_checkpoint"):  # pruned folders are not offered
            self.fields[name].queryset = self.fields[name].queryset.on_disk()

    def endpoint(self) -> dict[str, str]:
        """``round_create``'s endpoint settings; empty (in-process) without a URL."""
        data = self.cleaned_data
        if not data["endpoint_url"].strip():
            return {}
        settings = {
            "base_url": data["endpoint_url"].strip(),
            "checkpoint_model": data["checkpoint_served_model"].strip(),
            "baseline_model": data["baseline_served_model"].strip(),
        }
        if data["baseline_endpoint_url"].strip():
            settings["baseline_base_url"] = data["baseline_endpoint_url"].strip()
        if data["api_key_env"].strip():
            settings["api_key_env"] = data["api_key_env"].strip()
        return settings


@role_required(REVIEWER, ML_ENGINEER, hide=False)
def rounds(request: HttpRequest) -> HttpResponse:
    """Rounds with their state; a form to start one on a checkpoint (``?checkpoint=ID`` chooses
    it, as the run page's links do)."""
    chosen = request.GET.get("checkpoint", "")
    form = RoundForm(
        request.POST or None, initial={"checkpoint": chosen} if chosen.isdigit() else {}
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            round_ = eval_services.round_create(
                checkpoint=data["checkpoint"],
                project=data["project"],
                size=data["size"],
                created_by=request.user,
                baseline_model=data["baseline_model"].strip(),
                baseline_checkpoint=data["baseline_checkpoint"],
                repeat_every=data["repeat_every"] or 0,
                ci_width=data["ci_width"],
                sampling={"max_new_tokens": data["max_new_tokens"]},
                judge=data["judge"],
                human_fraction=data["human_fraction"] or 1.0,
                endpoint=form.endpoint(),
            )
        except (EvalError, ValueError) as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Round {round_.pk} created; responses are being generated.")
            return redirect("monitoring:eval-round", round_.pk)
    context = {
        "form": form,
        "rounds": EvalRound.objects.select_related("checkpoint__run", "project")[:100],
        "open_rounds": eval_selectors.rounds_open_for(request.user.pk),
    }
    return render(request, "monitoring/eval/rounds.html", context)


@role_required(REVIEWER, ML_ENGINEER, hide=False)
def round_prompts_available(request: HttpRequest) -> JsonResponse:
    """How many prompts of ``?project=SLUG`` a round on ``?checkpoint=ID`` (and, optionally,
    against ``?baseline_checkpoint=ID``) may use: those neither model trained on. The new-round
    form asks as its choices change, caps its number of prompts and shows the message."""
    ids = {name: request.GET.get(name, "") for name in ("checkpoint", "baseline_checkpoint")}
    if not ids["checkpoint"].isdigit() or not request.GET.get("project"):
        return JsonResponse({"error": "choose a checkpoint and a project"}, status=400)
    checkpoint = get_object_or_404(Checkpoint.objects.select_related("run"), pk=ids["checkpoint"])
    project = get_object_or_404(Project, slug=request.GET["project"])
    baseline = None
    if ids["baseline_checkpoint"].isdigit():
        baseline = get_object_or_404(Checkpoint, pk=ids["baseline_checkpoint"])
    try:
        held_out = prompt_selectors.prompts_held_out(
            project=project, checkpoint=checkpoint, baseline_checkpoint=baseline
        )
    except prompt_selectors.TrainingDataMissing as exc:
        return JsonResponse({"available": None, "total": None, "message": str(exc)})
    return JsonResponse(
        {
            "available": held_out.n_available,
            "total": held_out.n_project,
            "message": held_out.message(),
        }
    )


@role_required(REVIEWER, hide=False)
def rate(request: HttpRequest, round_id: int) -> HttpResponse:
    """The blind screen: the prompt, two unlabelled responses (sides counterbalanced), a pick,
    a 1-5 usefulness rating of one response, an optional note."""
    round_ = get_object_or_404(EvalRound, pk=round_id)
    if request.method == "POST":
        assignment_id = request.POST.get("assignment", "")
        if not assignment_id.isdigit():
            raise Http404("no such assignment")
        assignment = get_object_or_404(EvalAssignment, pk=int(assignment_id), reviewer=request.user)
        was_open = round_.status == EvalRound.Status.OPEN
        # The eval_rating task type reads its form (monitoring.eval_rating).
        answer = task_type_named(EVAL_RATING_NAME).answer_from_form(round_.project, request.POST, 2)
        try:
            eval_services.eval_submit(
                assignment=assignment,
                reviewer=request.user,
                pick=answer["pick"],
                usefulness=answer["usefulness"],
                note=request.POST.get("note", ""),
                elapsed_ms=int(request.POST.get("elapsed_ms", "0") or 0),
            )
        except (EvalError, ValueError) as exc:
            messages.error(request, str(exc))
        else:
            round_.refresh_from_db()
            if was_open and round_.status == EvalRound.Status.CLOSED:
                messages.success(
                    request,
                    "That was the last rating: every item has its ratings, the round closed.",
                )
        return redirect("monitoring:eval-rate", round_.pk)
    assignment = eval_services.eval_claim_next(reviewer=request.user, round_=round_)
    if assignment is None:
        return render(request, "monitoring/eval/rate_done.html", {"round": round_})
    item = assignment.item
    left, right = screen_order(
        assignment.shown_left, pair=EVAL_PAIR, values=(item.checkpoint_text, item.baseline_text)
    )
    context = {
        "round": round_,
        "assignment": assignment,
        "prompt": item.prompt,
        "left": left,
        "right": right,
        # Usefulness is about the checkpoint's response; the screen names its side, not its model.
        "rated_side": screen_side(
            EvalAssignment.Side.CHECKPOINT, shown_left=assignment.shown_left, pair=EVAL_PAIR
        ),
        "levels": range(1, 6),
        # A repeat (an item rated before) is not among the items left: count it as this one.
        "left_for_me": eval_selectors.items_left_for(round_, request.user.pk)
        + (assignment.kind == EvalAssignment.Kind.REPEAT),
    }
    return render(request, "monitoring/eval/rate.html", context)


@role_required(REVIEWER, hide=False)
def rate_skip(request: HttpRequest, round_id: int, assignment_id: int) -> HttpResponse:
    """Skip the item on the screen (POST): it goes to another reviewer; the next one is shown."""
    if request.method != "POST":
        return redirect("monitoring:eval-rate", round_id)
    assignment = get_object_or_404(
        EvalAssignment.objects.select_related("item__round"),
        pk=assignment_id,
        item__round_id=round_id,
        reviewer=request.user,
    )
    try:
        eval_services.eval_skip(reviewer=request.user, assignment=assignment)
    except EvalError as exc:
        messages.error(request, str(exc))
    else:
        messages.info(request, "Skipped: another reviewer rates that one.")
    return redirect("monitoring:eval-rate", round_id)


@role_required(REVIEWER, ML_ENGINEER, hide=False)
def round_detail(request: HttpRequest, round_id: int) -> HttpResponse:
    """A round's results: win rate with its interval over time, usefulness, agreement, the items
    reviewers disagreed on, and the responses side by side."""
    round_ = get_object_or_404(
        EvalRound.objects.select_related("checkpoint__run", "baseline_checkpoint", "project"),
        pk=round_id,
    )
    if request.method == "POST" and request.POST.get("action") == "close":
        eval_services.round_close(round_=round_)
        return redirect("monitoring:eval-round", round_.pk)
    if request.method == "POST" and request.POST.get("action") == "judge":
        try:
            round_judge_services.round_judge_launch(round_=round_)
        except RoundJudgeError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, "The judge's job is queued: it rates only what is missing.")
        return redirect("monitoring:eval-round", round_.pk)
    results = eval_selectors.round_results(round_)
    context = {
        "round": round_,
        "results": results,
        "over_time": results["over_time"],
        "judge": ppi_selectors.round_judge_results(round_),
        "consistency": repeat_selectors.round_repeat_consistency(round_),
    }
    return render(request, "monitoring/eval/round.html", context)


@role_required(REVIEWER, ML_ENGINEER, hide=False)
def round_progress(request: HttpRequest, round_id: int) -> JsonResponse:
    """The round's status, its answers generated so far, its win rate after each rating so far,
    and its judge's progress (the results page polls this)."""
    round_ = get_object_or_404(EvalRound, pk=round_id)
    over_time = eval_selectors.round_win_rate_over_time(round_)
    judge = None
    if round_.judge_id is not None:
        judge = {
            "status": round_.judge_status,
            "label": round_.get_judge_status_display(),
            "done": round_.judge_done,
            "total": round_.judge_total,
        }
    return JsonResponse(
        {
            "status": round_.status,
            "status_label": round_.get_status_display(),
            "generation": {"done": round_.answers_done, "total": round_.answers_total},
            "n": len(over_time),
            "over_time": over_time,
            "judge": judge,
        }
    )


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=StopDecision.Decision.choices)
    checkpoint = forms.ModelChoiceField(queryset=Checkpoint.objects.all(), required=False)
    round = forms.ModelChoiceField(queryset=EvalRound.objects.all(), required=False)
    note = forms.CharField(required=False, widget=forms.Textarea, max_length=5000)
    kappa_threshold = forms.FloatField(min_value=-1, max_value=1, required=False)


@role_required(REVIEWER, hide=False, methods=("POST",))
def run_decide(request: HttpRequest, run_id: int) -> HttpResponse:
    """Record a reviewer's stop / continue / roll-back decision on a run."""
    run = get_object_or_404(TrainingRun, pk=run_id)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(f"{k}: {v[0]}" for k, v in form.errors.items()))
        return redirect("monitoring:run-detail", run.pk)
    data = form.cleaned_data
    try:
        eval_services.decision_record(
            run=run,
            decision=data["decision"],
            reviewer=request.user,
            note=data["note"],
            checkpoint=data["checkpoint"],
            round_=data["round"],
            kappa_threshold=(
                DEFAULT_KAPPA_THRESHOLD
                if data["kappa_threshold"] is None
                else data["kappa_threshold"]
            ),
        )
    except EvalError as exc:
        messages.error(request, str(exc))
    else:
        label = StopDecision.Decision(data["decision"]).label.lower()
        messages.success(request, f"Decision recorded: {label}.")
    return redirect("monitoring:run-detail", run.pk)
