"""Batched chat generation with a causal LM (torch + transformers, no Django).

Used for the demo's responses, for human-eval rounds and for local-model judges. Prompts are rendered
with the model's own chat template and left-padded, so every row's generation starts right after its
prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Message = dict[str, str]
Conversation = Sequence[Message]


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample. ``temperature`` 0 means greedy decoding."""

    max_new_tokens: int = 160
    temperature: float = 0.7
    top_p: float = 0.9
    repetition_penalty: float = 1.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


@dataclass(frozen=True)
class Generation:
    """One generated response: its text, its length in tokens, and whether it ended with EOS."""

    text: str
    n_tokens: int
    finished: bool


class ChatGenerator:
    """Holds a model and tokenizer loaded from a local Hugging Face folder (CPU or CUDA).
    ``engine``: the rollout engine that generates (``training.inference.engine``): 'generate'
    (transformers' sampling, the default), 'static', 'llamacpp', 'vllm' or 'auto'; the others draw with the
    inverse-CDF sampler, the same distribution from different random numbers."""

    def __init__(
        self, model_dir: str | Path, *, device: str | None = None, engine: str = "generate"
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from training.recipes.lora import load_trained

        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), padding_side="left")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        # A LoRA run's adapter folder loads as its base with the adapters merged in.
        self.model = load_trained(AutoModelForCausalLM, model_dir, dtype=dtype)
        self.model.to(self.device).eval()
        self.engine = engine

    def generate(
        self,
        conversations: Sequence[Conversation],
        config: SamplingConfig,
        *,
        batch_size: int = 8,
        progress: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        """Generate one response per conversation, in order. Deterministic for a given seed.
        ``progress``, when given, is called after each batch with the responses done so far."""
        torch = self._torch
        torch.manual_seed(config.seed)
        eos_id = self.tokenizer.eos_token_id
        results: list[Generation] = []
        for start in range(0, len(conversations), batch_size):
            chunk = conversations[start : start + batch_size]
            texts = [
                self.tokenizer.apply_chat_template(
                    list(messages), add_generation_prompt=True, tokenize=False
                )
                for messages in chunk
            ]
            inputs = self.tokenizer(
                texts, return_tensors="pt", padding=True, add_special_tokens=False
            ).to(self.device)
            if self.engine != "generate":
                results += self._engine_batch(inputs["input_ids"], inputs["attention_mask"], config)
                if progress is not None:
                    progress(len(results))
                continue
            sampling = (
                {"do_sample": True, "temperature": config.temperature, "top_p": config.top_p}
                if config.temperature > 0
                else {"do_sample": False}
            )
            with torch.inference_mode():
                output = self.model.generate(
                    **inputs,
                    max_new_tokens=config.max_new_tokens,
                    repetition_penalty=config.repetition_penalty,
                    pad_token_id=self.tokenizer.pad_token_id,
                    **sampling,
                )
            new_tokens = output[:, inputs["input_ids"].shape[1] :]
            for row in new_tokens.tolist():
                finished = eos_id in row
                kept = row[: row.index(eos_id)] if finished else row
                text = self.tokenizer.decode(kept, skip_special_tokens=True).strip()
                results.append(Generation(text=text, n_tokens=len(kept), finished=finished))
            if progress is not None:
                progress(len(results))
        return results

    def _engine_batch(
        self, input_ids: Any, attention: Any, config: SamplingConfig
    ) -> list[Generation]:
        """One batch through the rollout engine ``self.engine`` (its seed from torch's global
        generator, seeded by ``generate``)."""
        from training.inference.engine import SamplingSettings
        from training.inference.engine_choice import engine_for

        eos_id = self.tokenizer.eos_token_id
        settings = SamplingSettings(
            max_new_tokens=config.max_new_tokens,
            temperature=config.temperature if config.temperature > 0 else 1.0,
            top_p=config.top_p,
            greedy=config.temperature == 0,
            eos_token_ids=(eos_id,),
            repetition_penalty=config.repetition_penalty,
        )
        with self._torch.inference_mode():
            output = engine_for(self.engine, self.model).generate(
                self.model, input_ids, attention, settings
            )
        results = []
        for tokens, finished in zip(output.tokens, output.finished, strict=True):
            kept = tokens[:-1] if finished else tokens
            text = self.tokenizer.decode(kept, skip_special_tokens=True).strip()
            results.append(Generation(text=text, n_tokens=len(kept), finished=finished))
        return results
