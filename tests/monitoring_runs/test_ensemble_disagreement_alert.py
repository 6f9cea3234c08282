"""The "ensemble disagreement rising" alert: relative to the run's first evaluation (PIPELINE.md:
alert at twice the members' disagreement on the first checkpoint)."""

import pytest

from monitoring.alerts import Rule
from monitoring.models import Alert
from monitoring.selectors.runs import alert_thresholds
from training import services

pytestmark = pytest.mark.django_db

METRIC = "eval_ensemble_disagreement"


def test_a_rising_disagreement_opens_the_alert_at_twice_the_first_value(make_run):
    """Synthetic rising series 0.10, 0.15, 0.19, 0.25, 0.30 at steps 10..50: the first value is
    the baseline (no alert), the limit is 2 x 0.10 = 0.20, so 0.15 and 0.19 stay quiet and 0.25 at
    step 40 opens one alert with that limit as its threshold; 0.30 keeps it open (one per metric)."""
    run = make_run(kind="rloo")
    series = {10: 0.10, 20: 0.15, 30: 0.19, 40: 0.25, 50: 0.30}
    for step, value in series.items():
        services.metrics_record(run_id=run.pk, step=step, metrics={METRIC: value})
    (alert,) = Alert.objects.filter(run=run, metric=METRIC)
    assert (alert.step, alert.value, alert.direction) == (40, 0.25, ">")
    assert alert.threshold == pytest.approx(0.20)
    assert alert.resolved_at is None
    assert "ensemble disagreement rising" in alert.meaning
    assert "hacking check" in alert.diagnosis


def test_a_falling_back_disagreement_resolves_it_and_a_flat_one_never_opens(make_run):
    """0.1 then 0.3 (open) then 0.15 (resolved); a second run flat at 0.1 never alerts."""
    rising = make_run(kind="grpo", name="rising")
    for step, value in {1: 0.1, 2: 0.3, 3: 0.15}.items():
        services.metrics_record(run_id=rising.pk, step=step, metrics={METRIC: value})
    assert Alert.objects.get(run=rising, metric=METRIC).resolved_at is not None
    flat = make_run(kind="grpo", name="flat")
    for step in range(1, 6):
        services.metrics_record(run_id=flat.pk, step=step, metrics={METRIC: 0.1})
    assert not Alert.objects.filter(run=flat).exists()


def test_a_relative_rule_has_no_limit_before_its_first_value_and_no_chart_line():
    """limit(None) is None (nothing to compare yet); limit(0.4) = 0.8; the charts draw fixed
    thresholds only."""
    rule = Rule(METRIC, ">", 2.0, "rising", 2, relative_to_first=True)
    assert rule.limit(None) is None and rule.limit(0.4) == pytest.approx(0.8)
    assert rule.breached(0.81, rule.limit(0.4)) and not rule.breached(0.79, rule.limit(0.4))
    assert METRIC not in alert_thresholds() and "kl" in alert_thresholds()
