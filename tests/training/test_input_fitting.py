"""Long inputs on real data (issue 22): every model input fits that model's own limits as well as
the run's max_length; the response stays whole, the prompt keeps the end of the conversation, and the
summary counts what was cut or dropped. Tiny models with small position tables stand in for MiniLM's
512 positions against a long HH-RLHF conversation."""

import json
import logging
import shutil

import pytest
import torch

from tests.helpers.tiny_models import tiny_llama, write_jsonl
from training.recipes.data import ChatEncoder, FitLog, fit_prompt, prompt_suffixes, token_limit
from training.recipes.models import input_limit, load_tokenizer

USER_TURNS = [
    "How do I reverse a list in Python? " * 6,
    "What is the capital of France? " * 6,
    "Give me a synonym for happy.",
]
CONVERSATION = (
    ("user", USER_TURNS[0]),
    ("assistant", "Use reversed(xs) or xs[::-1]. " * 5),
    ("user", USER_TURNS[1]),
    ("assistant", "Paris. " * 8),
    ("user", USER_TURNS[2]),
)


@pytest.fixture(scope="session")
def short_bert_dir(tmp_path_factory, tiny_bert_dir):
    """The tiny BERT with 40 positions (MiniLM has 512): a conversation plus an answer overflows it."""
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("short-bert")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        if (tiny_bert_dir / name).is_file():
            shutil.copy(tiny_bert_dir / name, folder / name)
    config = BertConfig.from_pretrained(str(tiny_bert_dir))
    config.max_position_embeddings = 40
    torch.manual_seed(0)
    BertModel(config).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def short_llama_dir(tmp_path_factory, tiny_tokenizer_dir):
    """The tiny Llama with 96 positions, saved as the policy would be."""
    folder = tiny_llama(tmp_path_factory.mktemp("short-llama"), tiny_tokenizer_dir)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 96
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_token_limit_is_the_smallest_of_run_positions_and_tokenizer():
    """512 asked, 40 positions, a tokenizer without a stated limit (1e30): 40. A tokenizer saying
    30: 30. No model config: max_length."""

    class Config:
        max_position_embeddings = 40

    class Tokenizer:
        def __init__(self, limit):
            self.model_max_length = limit

    assert token_limit(max_length=512, model_config=Config(), tokenizer=Tokenizer(10**30)) == 40
    assert token_limit(max_length=512, model_config=Config(), tokenizer=Tokenizer(30)) == 30
    assert token_limit(max_length=64) == 64


def test_input_limit_reads_the_folders_position_table(short_llama_dir):
    assert input_limit(short_llama_dir, max_length=512) == 96
    assert input_limit(short_llama_dir, max_length=64) == 64


def test_prompt_suffixes_drop_whole_leading_turns_and_keep_a_system_message():
    """Suffixes start at user turns; a leading system message stays in every one."""
    assert prompt_suffixes(CONVERSATION) == [CONVERSATION, CONVERSATION[2:], CONVERSATION[4:]]
    with_system = (("system", "Be kind."), *CONVERSATION)
    assert prompt_suffixes(with_system)[-1] == (("system", "Be kind."), CONVERSATION[4])
    # the longest suffix within the budget, counted here in messages
    assert fit_prompt(CONVERSATION, 3, len) == (CONVERSATION[2:], True)
    assert fit_prompt(CONVERSATION, 5, len) == (CONVERSATION, False)
    assert fit_prompt(CONVERSATION, 0, len) == (CONVERSATION[4:], True)


def test_a_long_conversation_keeps_its_last_user_turn_whole_and_the_response_whole(
    tiny_tokenizer_dir,
):
    """Limit 96 tokens: the whole conversation is far longer, the last user turn alone and the
    response fit. The prompt is the last user turn rendered alone (not a token cut through a turn),
    the completion is the whole response, and the cut is counted once however often it is seen."""
    tokenizer = load_tokenizer(tiny_tokenizer_dir)
    fit = FitLog("pairs")
    encoder = ChatEncoder(tokenizer, max_length=96, prompt_budget=48, fit=fit)
    assert len(encoder.prompt_ids(CONVERSATION)) > 96
    response = "Cheerful."
    seq = encoder.encode(CONVERSATION, response)
    assert len(seq.input_ids) <= 96
    assert list(seq.input_ids[: seq.prompt_length]) == encoder.prompt_ids(CONVERSATION[4:])
    assert tokenizer.decode(seq.input_ids[seq.prompt_length :]) == "Cheerful.<|im_end|>\n"
    encoder.encode(CONVERSATION, response)
    assert (fit.truncated, fit.dropped) == (1, 0)
    short = (("user", "Is water wet?"),)
    encoder.encode(short, "Yes.")
    assert fit.truncated == 1  # nothing cut, nothing counted


def test_a_pair_shares_one_fitted_prompt_and_a_pair_cut_to_the_same_tokens_is_dropped(
    tiny_tokenizer_dir, caplog
):
    """Chosen and rejected read the same prompt ids (sized for the longer answer). Two answers that
    differ only after the limit are the same once cut: dropped, counted, and logged at debug level."""
    tokenizer = load_tokenizer(tiny_tokenizer_dir)
    encoder = ChatEncoder(tokenizer, max_length=64, prompt_budget=32, fit=FitLog("pairs"))
    chosen, rejected = encoder.encode_pair(CONVERSATION, "Paris.", "Paris is in France. " * 3)
    assert chosen.prompt_length == rejected.prompt_length
    assert chosen.input_ids[: chosen.prompt_length] == rejected.input_ids[: rejected.prompt_length]
    same_start = "Water makes things wet. " * 20
    with caplog.at_level(logging.DEBUG, logger="training.fit"):
        assert encoder.encode_pair(CONVERSATION, same_start + "Yes.", same_start + "No.") is None
    assert encoder.fit.summary() == {"pairs_truncated": 2, "pairs_dropped": 1}
    assert "pairs dropped #1" in caplog.text and "pairs truncated #2" in caplog.text


def test_an_encoder_reward_model_scores_a_conversation_longer_than_its_positions(short_bert_dir):
    """The crash of issue 22 (BERT's embeddings: tensor a (530) vs b (512)), in small: the plain
    tokenizer call at the run's length overflows the 40 positions and the model raises; the scorer
    fits the input to 40 tokens, the response whole after [SEP], and scores it."""
    from training.recipes.scoring import RewardScorer, load_sequence_classifier

    tokenizer = load_tokenizer(short_bert_dir)
    model = load_sequence_classifier(
        short_bert_dir, device=torch.device("cpu"), tokenizer=tokenizer
    ).eval()
    text = "\n\n".join(content for _, content in CONVERSATION)
    unfitted = tokenizer(
        text, "Cheerful, glad.", truncation=True, max_length=512, return_tensors="pt"
    )
    assert unfitted["input_ids"].shape[1] > 40
    with pytest.raises((RuntimeError, IndexError)):
        model(**unfitted)

    scorer = RewardScorer(model, tokenizer, max_length=512, prompt_budget=256)
    assert scorer.max_length == 40
    fitted = scorer.encode(CONVERSATION, "Cheerful, glad.")
    assert len(fitted.input_ids) <= 40
    answer = tokenizer("Cheerful, glad.", add_special_tokens=False)["input_ids"]
    second = fitted.token_type_ids.index(1)
    assert list(fitted.input_ids[second:-1]) == answer  # the response whole, before its [SEP]
    with torch.no_grad():
        assert torch.isfinite(scorer.score([fitted])).all()
    assert scorer.fit.summary() == {"samples_truncated": 1, "samples_dropped": 0}


def test_encoder_inputs_that_fit_are_what_the_tokenizer_gives(tiny_bert_dir):
    """Fitting changes nothing when nothing needs cutting: [CLS] prompt [SEP] response [SEP] with the
    tokenizer's own ids and token types."""
    from training.recipes.scoring import RewardScorer, load_sequence_classifier

    tokenizer = load_tokenizer(tiny_bert_dir)
    model = load_sequence_classifier(tiny_bert_dir, device=torch.device("cpu"), tokenizer=tokenizer)
    scorer = RewardScorer(model, tokenizer, max_length=128, prompt_budget=64)
    prompt = (("user", "is water wet?"), ("assistant", "yes."), ("user", "why?"))
    expected = tokenizer("is water wet?\n\nyes.\n\nwhy?", "it is a liquid.")
    got = scorer.encode(prompt, "it is a liquid.")
    assert list(got.input_ids) == expected["input_ids"]
    assert list(got.token_type_ids) == expected["token_type_ids"]
    assert scorer.fit.truncated == 0


def _long_prompts_file(tmp_path, n=4):
    rows = [
        {
            "prompt": [{"role": r, "content": c} for r, c in CONVERSATION[:-1]]
            + [{"role": "user", "content": f"Question {i}: give me a synonym for happy."}],
            "chosen": "Cheerful. " * 30,
            "rejected": "Sad. " * 30,
        }
        for i in range(n)
    ]
    return write_jsonl(tmp_path / "long.jsonl", rows)


def test_rloo_at_the_default_max_length_with_an_encoder_reward_model_of_few_positions(
    tiny_llama_dir, short_bert_dir, tmp_path
):
    """RLOO on long conversations at max_length 512 (the default) with a 40-position reward model:
    before issue 22 the first scoring raised in BERT's embeddings; now every step completes, the
    summary counts the samples the reward model read cut, and the missing-EOS share is logged."""
    from training.recipes import RLOOConfig
    from training.recipes.rloo import train_rloo

    config = RLOOConfig(
        model=str(tiny_llama_dir),
        reward_model=str(short_bert_dir),
        data=str(_long_prompts_file(tmp_path)),
        output_dir=str(tmp_path / "run"),
        batch_size=2,
        rloo_k=2,
        max_new_tokens=4,
        eval_prompts=0,
        checkpoint_every=0,
        device="cpu",
        max_steps=1,
    )
    assert config.max_length == 512
    result = train_rloo(config)
    assert result.status == "completed"
    assert result.summary["samples_truncated"] == 4  # 2 prompts x 2 samples, all too long
    assert result.summary["samples_dropped"] == 0
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["missing_eos_penalised"] == pytest.approx(1 - row["eos_rate"])


def test_dpo_on_a_policy_with_few_positions_fits_every_pair(short_llama_dir, tmp_path):
    """DPO at max_length 512 on a 96-position policy: pairs are cut to 96 tokens, counted."""
    from training.recipes import DPOConfig
    from training.recipes.dpo import train_dpo

    result = train_dpo(
        DPOConfig(
            model=str(short_llama_dir),
            data=str(_long_prompts_file(tmp_path)),
            output_dir=str(tmp_path / "run"),
            batch_size=2,
            max_steps=1,
            checkpoint_every=0,
            device="cpu",
        )
    )
    assert result.status == "completed"
    assert result.summary["pairs_truncated"] == 4 and result.summary["pairs_dropped"] == 0
