"""Import progress: the rate and time left shown on the job page and printed by the command."""

import pytest

from annotation.services.import_result import ProgressMeter, duration_text


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rate_and_time_left_are_measured_from_the_phase_start():
    """10,000 rows in 2 s is 5,000 rows/s; 90,000 rows to go at that rate is 18 s."""
    clock = _Clock()
    meter = ProgressMeter(clock=clock)
    first = meter.figures("validating", 0, 100_000)
    assert (first["rows_per_s"], first["eta_s"]) == (None, None)  # nothing measured yet
    clock.now += 2.0
    figures = meter.figures("validating", 10_000, 100_000)
    assert figures == {
        "phase": "validating",
        "rows_done": 10_000,
        "rows_total": 100_000,
        "rows_per_s": 5000,
        "eta_s": 18,
    }


def test_a_new_phase_starts_its_own_clock():
    """The write phase's rate counts only its own rows and seconds: 1,000 rows in 4 s is 250/s."""
    clock = _Clock()
    meter = ProgressMeter(clock=clock)
    meter.figures("validating", 0, 10)
    clock.now += 50
    meter.figures("validating", 10, 10)
    meter.figures("importing", 0, 2000)
    clock.now += 4
    figures = meter.figures("importing", 1000, 2000)
    assert (figures["rows_per_s"], figures["eta_s"]) == (250, 4)


def test_unknown_total_gives_a_rate_and_no_time_left():
    clock = _Clock()
    meter = ProgressMeter(clock=clock)
    meter.figures("validating", 0, None)
    clock.now += 1
    assert meter.line("validating", 3000, None) == "validating: 3000 rows, 3000 rows/s"


def test_line_says_about_for_the_estimated_total():
    """While validating, the total is the file's line count (blank lines too): "about"."""
    clock = _Clock()
    meter = ProgressMeter(clock=clock)
    meter.figures("validating", 0, 100)
    clock.now += 10
    assert (
        meter.line("validating", 50, 100) == "validating: 50 of about 100 rows, 5 rows/s, 10 s left"
    )
    meter.figures("importing", 0, 100)
    clock.now += 1
    assert meter.line("importing", 100, 100) == "importing: 100 of 100 rows, 100 rows/s, 0 s left"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (59.4, "59 s"), (60, "1 min 00 s"), (200, "3 min 20 s"), (3900, "1 h 05 min")],
)
def test_duration_text(seconds, text):
    assert duration_text(seconds) == text
