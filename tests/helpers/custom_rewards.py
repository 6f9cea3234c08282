"""A reward registered from outside Concord's code, as a user's module does (``reward_modules``)."""

from training.algorithms.rewards import register


@register("mentions_concord")
def mentions_concord(completion: str, *, answer: str | None = None, bonus: float = 1.0) -> float:
    """``bonus`` when the completion says "concord" (any case), else 0."""
    return bonus * ("concord" in completion.lower())
