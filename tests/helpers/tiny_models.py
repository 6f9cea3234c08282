"""Tiny models built from configs, a tiny byte-level BPE tokenizer with a ChatML template, the 8
preference pairs they were trained on, and JSONL writing. Nothing here downloads or needs the
packaged models.

The fixtures (``tiny_tokenizer_dir``, ``tiny_llama_dir``, ``tiny_reward_dir``, ``tiny_bert_dir``) are
made available to a test folder by importing them into its conftest.py."""

import json
from pathlib import Path

import pytest
import torch

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PAIRS = [
    (
        "How do I reverse a list in Python?",
        "Use reversed(xs) or xs[::-1].",
        "Lists cannot be reversed.",
    ),
    ("What is the capital of France?", "Paris.", "The capital of France is Berlin."),
    ("Give me a synonym for happy.", "Cheerful.", "Sad."),
    ("Is water wet?", "Water makes things wet.", "No idea, sorry."),
    ("Add 2 and 3.", "2 + 3 = 5.", "2 + 3 = 23."),
    ("Name a primary colour.", "Red.", "Purple is the only primary colour."),
    ("Translate 'bonjour' to English.", "Hello.", "Goodbye."),
    ("How many legs has a spider?", "Eight.", "Six, like all insects."),
]


def _corpus() -> list[str]:
    return [text for row in PAIRS for text in row] * 4


def chatml_tokenizer(folder: Path, corpus: list[str], *, vocab_size: int) -> Path:
    """A byte-level BPE tokenizer of about ``vocab_size`` tokens trained on ``corpus``, with the
    ChatML template and <|im_end|> as EOS and padding (as SmolLM2), saved in ``folder``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        bos_token="<|im_start|>",
    )
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    """A ~300-token byte-level BPE tokenizer trained on the test sentences (see chatml_tokenizer)."""
    return chatml_tokenizer(tmp_path_factory.mktemp("tiny-tokenizer"), _corpus(), vocab_size=320)


def tiny_llama(
    folder: Path,
    tokenizer_dir: Path,
    *,
    seed: int = 0,
    for_classification: bool = False,
    max_positions: int = 512,
    hidden_size: int = 32,
) -> Path:
    """A 2-layer Llama (hidden ``hidden_size``, 32 by default, its MLP twice that; 4 heads, 2 KV
    heads: grouped-query attention like SmolLM2) saved with the tiny tokenizer, as a causal LM or a
    1-label sequence classifier."""
    from transformers import (
        AutoTokenizer,
        LlamaConfig,
        LlamaForCausalLM,
        LlamaForSequenceClassification,
    )

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=not for_classification,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        num_labels=1,
    )
    torch.manual_seed(seed)
    cls = LlamaForSequenceClassification if for_classification else LlamaForCausalLM
    cls(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, tiny_tokenizer_dir) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tiny_tokenizer_dir)


@pytest.fixture(scope="session")
def engine_llama_dir(tmp_path_factory, tiny_tokenizer_dir):
    """A 2-layer Llama with grouped-query attention, untied output layer and large initial
    weights, so greedy answers vary from token to token (the tiny test model's tied embeddings
    only repeat the prompt's last token)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("engine-llama")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        initializer_range=0.2, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_reward_dir(tmp_path_factory, tiny_tokenizer_dir) -> Path:
    """A tiny Llama with a one-output classification head (a reward model for PPO and RLOO)."""
    return tiny_llama(
        tmp_path_factory.mktemp("tiny-rm"), tiny_tokenizer_dir, seed=1, for_classification=True
    )


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def smollm2_dir() -> Path | None:
    """The converted SmolLM2 folder when fetch_models has run, else None."""
    from common.errors import ModelUnavailableError
    from common.model_registry import model_path

    try:
        return model_path("smollm2-135m-instruct")
    except ModelUnavailableError:
        return None


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A 2-layer BERT encoder (hidden 32) with a character-level WordPiece vocabulary: the shape of
    MiniLM (no chat template, [CLS] pooled)."""
    import string

    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-bert")
    chars = sorted(set(string.ascii_lowercase + string.digits + string.punctuation))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(str(folder))
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(str(folder))
    return folder
