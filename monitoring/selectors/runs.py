"""Reads for the monitoring pages: runs with their headline numbers, a run's metric series grouped
for its charts, checkpoints with the metrics of their step, samples, the stored config, and several
runs side by side."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from monitoring.models import Alert
from training import services as training_services
from training.models import Checkpoint, MetricPoint, RunSample, TrainingRun, kind_choices

# Charts (and a checkpoint's metrics) come in this order when the metric exists; others follow
# alphabetically. The page groups them (METRIC_GROUPS) and keeps this order inside each group.
PREFERRED = (
    "loss", "grad_norm", "learning_rate", "reward/score_mean", "reward/score_std",
    "reward/total_mean", "reward/shaped_mean", "kl", "kl_coef", "approx_kl", "clip_fraction",
    "entropy", "rewards/accuracy", "accuracy", "rewards/margin", "rewards/chosen",
    "rewards/rejected", "eval/accuracy", "eval/loss", "eval_reward_mean", "eval_reward_std",
    "eval_kl", "response_length", "eos_rate", "repetition_rate", "tokens_per_second", "samples_per_second",
    "memory_fraction",
)  # fmt: skip


# Chart groups, in page order: (key, title, patterns matched against the metric name in turn).
# The first group whose pattern matches takes the metric; the rest go to "other".
METRIC_GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("evaluation", "Evaluation", (r"^eval[/_]", r"^plain/eval")),
    ("loss", "Loss and optimiser", (r"loss$", r"^grad_norm$", r"^learning_rate$", r"^epoch$")),
    (
        "rewards",
        "Rewards",
        (r"^rewards?/", r"^accuracy$", r"^logps/", r"score", r"margin", r"^dynamic/"),
    ),
    (
        "policy",
        "KL and policy",
        (
            r"kl",
            r"clip_fraction",
            r"^entropy$",
            r"^ratio",
            r"_rate$",
            r"length$",
            r"^negative_logp$",
            r"^double_sampled_fraction$",
        ),
    ),
    ("throughput", "Throughput", (r"_per_second$", r"^step_time", r"^throughput")),
    ("system", "System and memory", (r"memory", r"^gpu_", r"^cpu_")),
)
OTHER_GROUP = ("other", "Other")
GROUP_PAGE_ORDER = ("loss", "rewards", "policy", "evaluation", "throughput", "system", "other")

# Which way is better, for the summary's "best" column; a metric not listed has no best.
LOWER_IS_BETTER = (r"loss$", r"^kl$", r"^approx_kl$", r"repetition_rate$", r"^memory_fraction$")
HIGHER_IS_BETTER = (
    r"accuracy$", r"margin$", r"reward/score_mean$", r"reward/total_mean$", r"^eval_reward_mean$",
    r"^eval/reward_mean$", r"_per_second$", r"eos_rate$",
)  # fmt: skip

# Shares between 0 and 1: their charts never show an axis above 1.
UNIT_INTERVAL = (r"accuracy$", r"(eos|repetition)_rate$", r"fraction$", r"clip_fraction_")


class _KindHeadlines(Mapping[str, tuple[tuple[tuple[str, ...], str], ...]]):
    """Each kind's headline numbers in the runs list, ((metric names, the first present is shown;
    label), ...): its spec's ``headlines`` in the kind registry, read on each use."""

    def _kinds(self) -> Mapping[str, Any]:
        from training.recipes.kinds import KINDS  # web code imports training.recipes in use

        return KINDS

    def __getitem__(self, kind: str) -> tuple[tuple[tuple[str, ...], str], ...]:
        return self._kinds()[kind].headlines

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds())

    def __len__(self) -> int:
        return len(self._kinds())


HEADLINES: Mapping[str, tuple[tuple[tuple[str, ...], str], ...]] = _KindHeadlines()


def metric_group(name: str) -> tuple[str, str]:
    """(group key, group title) of a metric name, by METRIC_GROUPS."""
    for key, title, patterns in METRIC_GROUPS:
        if any(re.search(pattern, name) for pattern in patterns):
            return key, title
    return OTHER_GROUP


def metric_direction(name: str) -> str:
    """'min' (lower is better), 'max' (higher is better) or '' (neither)."""
    if any(re.search(pattern, name) for pattern in LOWER_IS_BETTER):
        return "min"
    if any(re.search(pattern, name) for pattern in HIGHER_IS_BETTER):
        return "max"
    return ""


def metric_meta(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{metric: {group, group_title, group_order (the group's place on the page), order (the
    chart's place: PREFERRED, others after it), direction, unit_interval (a share in [0, 1])}}
    for the page's charts and summary."""
    preferred = {name: i for i, name in enumerate(PREFERRED)}
    meta: dict[str, dict[str, Any]] = {}
    for name in names:
        key, title = metric_group(name)
        meta[name] = {
            "group": key,
            "group_title": title,
            "group_order": GROUP_PAGE_ORDER.index(key),
            "order": preferred.get(name, len(PREFERRED)),
            "direction": metric_direction(name),
            "unit_interval": any(re.search(pattern, name) for pattern in UNIT_INTERVAL),
        }
    return meta


def groups_order() -> list[dict[str, str]]:
    """[{key, title}] of every chart group in page order (the page draws them in this order)."""
    titles = {key: title for key, title, _ in METRIC_GROUPS} | {OTHER_GROUP[0]: OTHER_GROUP[1]}
    return [{"key": key, "title": titles[key]} for key in GROUP_PAGE_ORDER]


def _latest_values(
    runs: Sequence[TrainingRun], names: Iterable[str]
) -> dict[int, dict[str, float]]:
    """{run id: {metric: value at its last logged step}} for the given metric names."""
    latest: dict[int, dict[str, float]] = defaultdict(dict)
    for run_id, name, value in (
        MetricPoint.objects.filter(run__in=runs, name__in=set(names))
        .order_by("run_id", "name", "step")
        .values_list("run_id", "name", "value")
    ):
        latest[run_id][name] = value  # ordered by step: the last one wins
    return latest


def runs_filtered(*, kind: str = "", status: str = "", project: str = "") -> QuerySet[TrainingRun]:
    """Runs, newest first, of one kind / status / project slug when given (empty: any)."""
    runs = TrainingRun.objects.select_related("snapshot__export__project", "created_by")
    if kind:
        runs = runs.filter(kind=kind)
    if status:
        runs = runs.filter(status=status)
    if project:
        runs = runs.filter(snapshot__export__project__slug=project)
    return runs


def runs_overview(
    *, kind: str = "", status: str = "", project: str = "", limit: int = 100
) -> list[dict[str, object]]:
    """Recent runs (filtered as ``runs_filtered``) with their kind's headline numbers
    ([{label, metric, value}], value None when not logged yet), loss, and open alert count."""
    runs = list(runs_filtered(kind=kind, status=status, project=project)[:limit])
    wanted = {"loss"} | {name for spec in HEADLINES.values() for names, _ in spec for name in names}
    latest = _latest_values(runs, wanted)
    open_alerts: dict[int, int] = defaultdict(int)
    for run_id in Alert.objects.filter(run__in=runs, resolved_at=None).values_list(
        "run_id", flat=True
    ):
        open_alerts[run_id] += 1
    rows: list[dict[str, object]] = []
    for run in runs:
        values = latest.get(run.pk, {})
        headline = []
        for names, label in HEADLINES.get(run.kind, ()):
            found = next((n for n in names if n in values), names[0])
            headline.append({"label": label, "metric": found, "value": values.get(found)})
        rows.append(
            {
                "run": run,
                "loss": values.get("loss"),
                "headline": headline,
                "alerts": open_alerts.get(run.pk, 0),
            }
        )
    return rows


def run_keeps_samples(run: TrainingRun) -> bool:
    """Whether the run's kind samples from its policy (its spec's ``rollouts``: PPO, RLOO, GRPO
    and any such kind registered later), so its page has samples to show. A kind no longer
    registered keeps none."""
    from training.recipes.kinds import KINDS  # web code imports training.recipes in use

    spec = KINDS.get(run.kind)
    return spec is not None and spec.rollouts


def runs_filter_choices() -> dict[str, list[tuple[str, str]]]:
    """The runs list's filter options: kinds, statuses, and the projects that have runs."""
    projects = (
        TrainingRun.objects.order_by("snapshot__export__project__slug")
        .values_list("snapshot__export__project__slug", flat=True)
        .distinct()
    )
    return {
        "kinds": kind_choices(),  # the registry now: a kind registered later too
        "statuses": list(TrainingRun.Status.choices),
        "projects": [(slug, slug) for slug in projects],
    }


def run_series(*, run: TrainingRun, after_step: int = -1) -> dict[str, list[list[float]]]:
    """{metric: [[step, value], ...]} for steps after ``after_step``, charts in preferred order."""
    series: dict[str, list[list[float]]] = defaultdict(list)
    for step, name, value in (
        MetricPoint.objects.filter(run=run, step__gt=after_step)
        .order_by("step")
        .values_list("step", "name", "value")
    ):
        series[name].append([step, value])
    order = {name: i for i, name in enumerate(PREFERRED)}
    return dict(sorted(series.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def run_phase(run: TrainingRun) -> dict[str, Any] | None:
    """{name, done, total, text} of the work the run reports before its next step, or None:
    e.g. text "reference log-probs, batch 3 of 4" (total 0: "batch 3"; nothing counted yet:
    the name alone, "loading the reward model")."""
    if not run.phase:
        return None
    text = run.phase
    if run.phase_done or run.phase_total:
        text += f", batch {run.phase_done}"
    if run.phase_total:
        text += f" of {run.phase_total}"
    return {"name": run.phase, "done": run.phase_done, "total": run.phase_total, "text": text}


def run_checkpoints(run: TrainingRun, *, eval_round_url: str = "") -> list[dict[str, Any]]:
    """The run's checkpoints still on disk (``keep_checkpoints`` prunes older ones), newest first:
    {id, step, path, created_at (ISO), saved (UTC text), result (the run's
    chosen result), metrics_step (the last logged step at or before the checkpoint's; None when
    nothing was logged yet), metrics {name: value} logged at that step, eval_url (the human-eval
    round form for this checkpoint, ``eval_round_url?checkpoint=ID``, when a URL is given and the
    run trains a policy: a reward model answers no prompt, so it has no round)}."""
    checkpoints = list(Checkpoint.objects.filter(run=run).on_disk().order_by("-step"))
    if run.kind == TrainingRun.Kind.RM:
        eval_round_url = ""
    values: dict[int, dict[str, float]] = defaultdict(dict)

    def read(steps: set[int]) -> None:
        for step, name, value in MetricPoint.objects.filter(run=run, step__in=steps).values_list(
            "step", "name", "value"
        ):
            values[step][name] = value

    read({c.step for c in checkpoints})  # usually a checkpoint's step was logged
    metric_steps: dict[int, int | None] = {}
    for checkpoint in checkpoints:
        if checkpoint.step in values:
            metric_steps[checkpoint.pk] = checkpoint.step
        else:  # the last logged step before it (one indexed query per such checkpoint)
            metric_steps[checkpoint.pk] = (
                MetricPoint.objects.filter(run=run, step__lt=checkpoint.step)
                .order_by("-step")
                .values_list("step", flat=True)
                .first()
            )
    read({s for s in metric_steps.values() if s is not None and s not in values})
    order = {name: i for i, name in enumerate(PREFERRED)}
    rows = []
    for checkpoint in checkpoints:
        step = metric_steps[checkpoint.pk]
        at_step = values.get(step, {}) if step is not None else {}
        rows.append(
            {
                "id": checkpoint.pk,
                "step": checkpoint.step,
                "path": checkpoint.path,
                "created_at": checkpoint.created_at.isoformat(),
                "saved": checkpoint.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                "result": run.result_checkpoint_id == checkpoint.pk,
                "metrics_step": step,
                "metrics": dict(
                    sorted(at_step.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
                ),
                "eval_url": f"{eval_round_url}?checkpoint={checkpoint.pk}"
                if eval_round_url
                else "",
            }
        )
    return rows


def run_samples(run: TrainingRun, *, after_step: int = -1) -> list[dict[str, Any]]:
    """[{step, samples: [{prompt, response, reward, figures}]}] of the evaluation steps after
    ``after_step``, oldest first."""
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for sample in RunSample.objects.filter(run=run, step__gt=after_step).order_by(
        "step", "position"
    ):
        by_step[sample.step].append(
            {
                "prompt": sample.prompt,
                "response": sample.response,
                "reward": sample.reward,
                "figures": sample.figures,
            }
        )
    return [{"step": step, "samples": samples} for step, samples in sorted(by_step.items())]


def run_config_rows(run: TrainingRun, *, with_paths: bool = True) -> list[dict[str, Any]]:
    """Every setting of the run's recipe: {name, value, default, set (the run overrides the
    default), help}, in the recipe's field order; keys the recipe does not know (an older run)
    follow with help "not a setting of this recipe". ``with_paths``: the fields Concord fills in
    from the run (model and reward-model folders, the snapshot's file, the run folder) hold those
    values, marked as set; without, their defaults (the compare page shows the run's model and
    data apart)."""
    from training.recipes.config import config_help
    from training.recipes.kinds import config_class

    stored = dict(run.config or {})
    managed = training_services.run_managed_values(run) if with_paths else {}
    rows = []
    for name, default, help_text in config_help(config_class(run.kind)):
        if name in managed:
            rows.append(
                {"name": name, "value": managed[name], "default": default, "set": True,
                 "help": f"{help_text} (filled in by Concord from the run)"}
            )  # fmt: skip
            stored.pop(name, None)
            continue
        value = stored.pop(name, default)
        rows.append(
            {"name": name, "value": value, "default": default, "set": name in (run.config or {}),
             "help": help_text}
        )  # fmt: skip
    for name, value in sorted(stored.items()):
        rows.append(
            {"name": name, "value": value, "default": None, "set": True,
             "help": "not a setting of this recipe"}
        )  # fmt: skip
    return rows


def runs_compare(*, run_ids: Sequence[int]) -> dict[str, Any]:
    """Several runs side by side: {runs: [TrainingRun] in the order asked (unknown ids left out),
    config: [{name, values (text, one per run; "" where a run's recipe has no such setting),
    differs}]}: what each run is (kind, model, data, reward model, GPUs), then every recipe setting
    alphabetically; rows that differ first, each part keeping that order."""
    found = TrainingRun.objects.select_related("snapshot__export__project").in_bulk(run_ids)
    runs = [found[i] for i in dict.fromkeys(run_ids) if i in found]
    columns = []
    for run in runs:
        identity = {
            "kind": run.get_kind_display(),
            "base_model": run.base_model,
            "data": f"{run.snapshot.export.project.slug} {run.snapshot.export.sha256[:10]}",
            "reward_model_run": run.reward_model_run_id or "",
            "gpus": run.gpus,
        }
        rows = run_config_rows(run, with_paths=False)
        columns.append(identity | {r["name"]: r["value"] for r in rows})
    identity_names = ["kind", "base_model", "data", "reward_model_run", "gpus"]
    settings_names = sorted({name for column in columns for name in column} - set(identity_names))
    rows = []
    for name in identity_names + settings_names:
        values = [_config_text(column.get(name, "")) for column in columns]
        rows.append({"name": name, "values": values, "differs": len(set(values)) > 1})
    rows.sort(key=lambda row: not row["differs"])  # stable
    return {"runs": runs, "config": rows}


def _config_text(value: object) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def runs_series(*, runs: Sequence[TrainingRun]) -> dict[str, dict[str, list[list[float]]]]:
    """{run id (text): {metric: [[step, value], ...]}} of several runs, for the compare page."""
    return {str(run.pk): run_series(run=run) for run in runs}


def alert_thresholds() -> dict[str, dict[str, object]]:
    """{metric: {threshold, direction, meaning}} to draw as lines on the charts (fixed thresholds
    only: a rule relative to the run's first value has no line of its own)."""
    return {
        rule["metric"]: {k: rule[k] for k in ("threshold", "direction", "meaning")}
        for rule in settings.CONCORD_ALERT_RULES
        if not rule.get("relative_to_first")
    }
