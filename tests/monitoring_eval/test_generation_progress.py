"""A round counts its answers as they are generated (answers_done of answers_total, 2 per prompt):
the generator reports after each batch, and the endpoint path after each chunk."""

import pytest

from monitoring.services import eval_rounds as eval_services
from tests.helpers.eval_rounds import BASELINE, TINY_SAMPLING, make_round
from tests.helpers.fake_chat_server import completion, fake_chat_server
from training.inference.generation import ChatGenerator, SamplingConfig

pytestmark = pytest.mark.django_db


def test_the_generator_reports_the_responses_done_after_each_batch(models_dir):
    """8 conversations in batches of 3: the callback hears 3, 6, then 8."""
    heard: list[int] = []
    generator = ChatGenerator(models_dir / BASELINE, device="cpu")
    conversations = [[{"role": "user", "content": f"Question {k}?"}] for k in range(8)]
    generator.generate(
        conversations, SamplingConfig(**TINY_SAMPLING), batch_size=3, progress=heard.append
    )
    assert heard == [3, 6, 8]


def test_a_round_counts_its_answers_from_zero_to_both_sides(run_with_checkpoints, monkeypatch):
    """A round of 4 prompts through an endpoint, in chunks of 3 (2 chunks a side): 0 of 8 when
    created, 8 of 8 once both sides answered; the answers are the same as unchunked."""
    monkeypatch.setattr(eval_services, "ENDPOINT_CHUNK", 3)
    with fake_chat_server(lambda body, headers: completion(body["model"])) as server:
        endpoint = {"base_url": server.base_url, "checkpoint_model": "c", "baseline_model": "b"}
        round_ = make_round(run_with_checkpoints, endpoint=endpoint)
        assert (round_.answers_done, round_.answers_total) == (0, 8)
        round_ = eval_services.round_generate(round_id=round_.pk)
    assert round_.status == "open", round_.error
    assert (round_.answers_done, round_.answers_total) == (8, 8)
    texts = set(round_.items.values_list("checkpoint_text", "baseline_text"))
    assert texts == {("c", "b")} and len(server.requests) == 8
