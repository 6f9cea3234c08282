"""Eval rounds' in-process answers through the engine CONCORD_GENERATION_ENGINE names: the
llama.cpp engine writes the greedy answers (texts and token counts) transformers' generate writes,
and the settings check the name against the engine module's list."""

import pytest

from monitoring.services import eval_rounds as eval_services
from tests.helpers.eval_rounds import make_round

pytestmark = pytest.mark.django_db


def _answers(round_):
    items = round_.items.select_related("prompt").order_by("prompt__text")
    return [
        (i.prompt.text, i.checkpoint_text, i.baseline_text, i.checkpoint_tokens, i.baseline_tokens)
        for i in items
    ]


def test_a_round_answers_alike_on_the_llamacpp_engine(run_with_checkpoints, settings):
    sampling = {"max_new_tokens": 8, "temperature": 0.0, "seed": 0}
    plain = make_round(run_with_checkpoints, sampling=sampling)
    plain = eval_services.round_generate(round_id=plain.pk)
    settings.CONCORD_GENERATION_ENGINE = "llamacpp"
    other = make_round(run_with_checkpoints, sampling=sampling)
    other = eval_services.round_generate(round_id=other.pk)
    assert plain.error == other.error == ""
    assert _answers(other) == _answers(plain)
    assert {(a[3], a[4]) for a in _answers(other)} == {
        (8, 8)
    }  # tokens (the tiny models' are special)


def test_the_settings_know_every_engine():
    from django.conf import settings

    from training.inference.engine import ENGINES

    assert settings.GENERATION_ENGINES == ENGINES
