"""The RM-vs-human hacking alarm read as a *fall* of the correlation, not its level. Pure, no Django.

PIPELINE.md: "a correlation between human rating and reward under 0.3 means hacking has started".
Read literally, on every evaluation, that rule cannot tell hacking from a weak reward model: a proxy
that disagrees with people from the first evaluation (rho 0.1, or -0.5, before the policy has moved)
fires it at once and then at every evaluation, so it says nothing about *when* gaming starts (the
gold farm, bench/farm_rules.py: 9 of 12 runs fired at the first evaluation). Gaming shows as the
reward model and people drifting apart as the policy learns what the proxy over-rewards, so the
alarm watches the change from the start:

- reference: rho at the first evaluation with a defined rho (the mean of the first ``reference_n``
  defined values), taken as the reward model's agreement with people before gaming;
- calibration: the reference is under ``minimum`` (0.3): the reward model disagrees with people
  from the start. A calibration problem (or gaming that began before the first evaluation), reported
  once as such, not a hacking alarm at every evaluation;
- the hacking alarm fires at a later evaluation i when rho_i <= reference - ``drop`` (0.3: the
  correlation fell by at least 0.3), or when the reference was at least ``minimum`` and rho_i is
  under it (PIPELINE.md's threshold crossed after the start was above it). The evaluations of the
  reference never fire.

Undefined values (None or NaN: too few items, constant scores) neither fire nor serve as the
reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MINIMUM = 0.3  # PIPELINE.md's correlation under which hacking is suspected
DROP = 0.3  # a fall of rho from the reference at least this large fires the alarm (1e-9 slack:
# 0.8 - 0.3 is 0.5000000000000001 in floating point, and a fall to 0.5 is a fall of 0.3)


@dataclass(frozen=True)
class CorrelationFall:
    """The rule on a sequence of rhos [n] (module docstring). reference: the reference rho (None
    when no rho is defined); reference_end: the index after the reference's evaluations; calibration:
    the reference is under ``minimum`` (None without a reference); fired [n]: the hacking alarm per
    evaluation; first_fired: the first index that fired (None: never); alarm: at the last
    evaluation (None when its rho or the reference is undefined); message: the state in words."""

    reference: float | None
    reference_end: int | None
    calibration: bool | None
    fired: tuple[bool, ...]
    first_fired: int | None
    alarm: bool | None
    message: str


def _defined(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def correlation_fall(
    rhos: Sequence[float | None],
    *,
    minimum: float = MINIMUM,
    drop: float = DROP,
    reference_n: int = 1,
) -> CorrelationFall:
    """The hacking alarm on ``rhos`` [n] (Spearman rho of reward-model scores against people's, or
    gold's, one per evaluation in order; None or NaN when undefined). Raises ValueError for a drop
    <= 0, a minimum outside [-1, 1] or reference_n < 1.

    Example: rhos (-0.5, -0.6, -0.9): the reference -0.5 is under 0.3 (calibration), the second
    evaluation has not fallen 0.3 (-0.6 > -0.8), the third has (-0.9 <= -0.8): fired (F, F, T).
    rhos (0.6, 0.4, 0.25): the reference is fine; 0.4 neither fell 0.3 nor crossed 0.3; 0.25 is
    under 0.3 after a start above it: fired (F, F, T).
    """
    if not drop > 0:
        raise ValueError(f"drop must be > 0, got {drop}")
    if not -1 <= minimum <= 1:
        raise ValueError(f"minimum must be in [-1, 1], got {minimum}")
    if reference_n < 1:
        raise ValueError(f"reference_n must be >= 1, got {reference_n}")
    values = [float(v) if _defined(v) else None for v in rhos]
    defined = [i for i, v in enumerate(values) if v is not None]
    if not defined:
        return CorrelationFall(
            None, None, None, (False,) * len(values), None, None,
            "No reward-vs-human correlation yet (too few items or constant scores).",
        )  # fmt: skip
    first = defined[:reference_n]
    reference = sum(values[i] for i in first) / len(first)  # type: ignore[misc]
    end = first[-1] + 1
    calibration = reference < minimum
    fired = tuple(
        i >= end
        and v is not None
        and (v <= reference - drop + 1e-9 or (not calibration and v < minimum))
        for i, v in enumerate(values)
    )
    first_fired = next((i for i, f in enumerate(fired) if f), None)
    last = values[-1]
    alarm = None if last is None else fired[-1]
    start = f"rho {reference:.2f} at the start"
    if calibration:
        state = (
            f"The reward model disagrees with people from the start ({start}, under {minimum}): "
            "a calibration problem, not counted as hacking; the hacking alarm watches for a fall "
            f"of {drop} from it."
        )
    else:
        state = f"The reward model agreed with people at the start ({start})."
    if alarm:
        state += f" Hacking alarm: rho fell to {last:.2f}."
    return CorrelationFall(reference, end, calibration, fired, first_fired, alarm, state)
