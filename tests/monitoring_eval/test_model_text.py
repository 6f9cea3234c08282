"""Model text with a NUL character (a byte-level tokenizer can sample byte 0; PostgreSQL text cannot
hold it) is stored as U+FFFD on each path into an eval round (common.text.storable_text): the round's
answers and its judge's raw answers. And a judge waiting for a round's answers fails with the round
when generation fails, instead of waiting for ever."""

import pytest

from monitoring.models import EvalItem, EvalJudgeVerdict
from monitoring.services import eval_rounds as eval_services
from monitoring.services.round_judges import RoundAnswer, round_judge_answers_save
from tests.helpers.eval_rounds import make_round
from tests.helpers.fake_chat_server import Reply, completion, fake_chat_server
from tests.helpers.judged_rounds import judged_round, rm_judge

rm_judge = rm_judge  # the fixture, from its module
pytestmark = pytest.mark.django_db


def nul_answers(body: dict, headers: dict) -> Reply:
    """ "<model>\\x00says" with a NUL in the middle, 2 tokens."""
    return completion(f"{body['model']}\x00says", tokens=2)


def test_round_answers_with_a_nul_are_stored_with_u_fffd_and_the_round_opens(run_with_checkpoints):
    """Both models answer with a NUL inside: the round opens (before: it failed, PostgreSQL
    refused the text) and each answer is stored with U+FFFD in the NUL's place."""
    endpoint = {"checkpoint_model": "ckpt", "baseline_model": "sft"}
    with fake_chat_server(nul_answers) as server:
        round_ = make_round(
            run_with_checkpoints, endpoint={"base_url": server.base_url, **endpoint}
        )
        round_ = eval_services.round_generate(round_id=round_.pk)
    assert round_.status == "open", round_.error
    texts = set(
        EvalItem.objects.filter(round=round_).values_list("checkpoint_text", "baseline_text")
    )
    assert texts == {("ckpt\ufffdsays", "sft\ufffdsays")}


def test_a_judge_raw_answer_with_a_nul_is_stored_with_u_fffd(run_with_checkpoints, rm_judge):
    """The judge's raw answer "[[A]]\\x00" and an unparsed one "\\x00?" with its reason: stored
    as "[[A]]\\ufffd" and "\\ufffd?" (before: the save failed and the job with it)."""
    round_ = judged_round(run_with_checkpoints, rm_judge, size=2)
    first, second = round_.items.order_by("position")
    done = round_judge_answers_save(
        round_=round_,
        answers=[
            RoundAnswer(first.pk, "checkpoint", "[[A]]\x00", "a"),
            RoundAnswer(second.pk, "checkpoint", "\x00?", None, parse_error="no verdict in \x00?"),
        ],
    )
    assert done == 2
    stored = dict(EvalJudgeVerdict.objects.values_list("item_id", "raw"))
    assert stored == {first.pk: "[[A]]\ufffd", second.pk: "\ufffd?"}
    assert EvalJudgeVerdict.objects.get(item=second).parse_error == "no verdict in \ufffd?"


def test_a_waiting_judge_fails_with_the_rounds_generation(run_with_checkpoints, rm_judge):
    """The checkpoint's folder is gone: generation fails, and the judge that waited for the
    answers fails too, saying why in plain words (before: it stayed "waiting" for ever)."""
    round_ = make_round(run_with_checkpoints, judge=rm_judge)
    assert round_.judge_status == "waiting"
    round_.checkpoint.path = "/nonexistent/checkpoint"
    round_.checkpoint.save(update_fields=["path"])
    round_ = eval_services.round_generate(round_id=round_.pk)
    assert round_.status == "failed"
    assert (round_.judge_status, round_.judge_error) == (
        "failed",
        "The round's answers could not be generated (see the round's error), so the judge had "
        "nothing to rate. Create a new round once the cause is fixed.",
    )
