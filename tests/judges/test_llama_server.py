"""An openai-kind judge through a real llama.cpp server (tests/helpers/llama_server.py: SmolLM2-135M
Q4_1 GGUF, not mocked): every pair of a small project asked in both orders, raw answers kept, each
answer either a verdict or a recorded parse failure, parsed verdicts stored as judgements."""

import pytest

from annotation.models import Judgement
from monitoring.models import JudgeOutput
from monitoring.services.judges import judge_create, judge_launch, judge_run
from tests.helpers.llama_server import llama_server  # noqa: F401 (fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.slow]
# Short, so the 135M model answers in the bracket form often enough (the default template's long
# instructions get prose back from it); greedy, so the answers are the same on every run.
SHORT_TEMPLATE = """Question: {prompt}
Response A: {response_a}
Response B: {response_b}
Which response is better? Reply with only "[[A]]" or "[[B]]"."""


def test_a_judge_runs_through_llama_cpp_in_both_orders(judged_project, llama_server):  # noqa: F811
    """12 answers (6 pairs x 2 orders) from the served model through the chat client; every one
    kept as generated and read by the parser; the pairs with a verdict, and only those, get a
    judgement of the machine annotator (at least one does: the short prompt is answered in the
    bracket form for some pairs)."""
    judge = judge_create(
        project=judged_project, name="llama", kind="openai", created_by=None,
        endpoint_url=llama_server.base_url, model_name=llama_server.model, template=SHORT_TEMPLATE,
        max_new_tokens=24, max_concurrency=2, timeout_s=120.0,
    )  # fmt: skip
    judge_launch(judge=judge)
    judge = judge_run(judge_id=judge.pk)
    assert judge.status == "succeeded", judge.error
    assert (judge.done, judge.total) == (12, 12)
    outputs = list(JudgeOutput.objects.filter(judge=judge).order_by("comparison", "shown_first"))
    assert [o.shown_first for o in outputs] == ["a", "b"] * 6
    assert all(o.raw.strip() for o in outputs)  # the model's words, as generated
    for output in outputs:
        assert bool(output.verdict) != bool(output.parse_error)
    parsed = {o.comparison_id for o in outputs if o.verdict}
    judged = set(
        Judgement.objects.filter(annotator=judge.annotator).values_list("comparison_id", flat=True)
    )
    assert judged == parsed and parsed, "no answer of the served model had a verdict"


def test_without_the_package_the_server_tests_fail_not_skip(monkeypatch, tmp_path):
    """CI must run the llama.cpp tests: a missing llama-cpp-python is a failure that says how to
    install it, never a skip."""
    from tests.helpers import llama_server as helper

    monkeypatch.setattr(helper.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match=r"make venv.*must run, not skip"):
        helper.start_llama_server(tmp_path / "model.gguf", tmp_path / "server.log")
