"""An eval round generated through a real llama.cpp server (tests/helpers/llama_server.py:
SmolLM2-135M Q4_1 GGUF, not mocked) instead of in-process."""

import pytest

from monitoring.services import eval_rounds as eval_services
from tests.helpers.eval_rounds import make_round
from tests.helpers.llama_server import llama_server  # noqa: F401 (fixture)
from training.inference.chat_client import ChatClient, EndpointConfig

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def test_a_round_is_generated_through_llama_cpp(run_with_checkpoints, llama_server):  # noqa: F811
    """4 prompts, both sides served by the one GGUF model, greedy with at most 16 tokens: every
    item gets a non-empty answer per side with the server's token count (1..16). The same model
    greedy gives both sides the same words, so the round has nothing to rate and closes at once
    (identical answers count as ties); a direct request for the first prompt gets the same text."""
    endpoint = {"base_url": llama_server.base_url, "checkpoint_model": llama_server.model,
                "baseline_model": llama_server.model, "max_concurrency": 2, "timeout_s": 120}  # fmt: skip
    sampling = {"max_new_tokens": 16, "temperature": 0.0, "seed": 0}
    round_ = make_round(run_with_checkpoints, endpoint=endpoint, sampling=sampling)
    round_ = eval_services.round_generate(round_id=round_.pk)
    assert round_.status == "closed", round_.error
    items = list(round_.items.select_related("prompt").order_by("position"))
    assert len(items) == 4
    for item in items:
        assert item.checkpoint_text.strip() and item.checkpoint_text == item.baseline_text
        assert 1 <= item.checkpoint_tokens <= 16 and item.baseline_tokens == item.checkpoint_tokens
    client = ChatClient(EndpointConfig(base_url=llama_server.base_url, model=llama_server.model))
    [again] = client.generate(
        [[{"role": "user", "content": items[0].prompt.text}]], max_tokens=16, temperature=0.0
    )
    assert again == items[0].checkpoint_text
