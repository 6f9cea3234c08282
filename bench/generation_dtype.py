"""SmolLM2-135M on CPU: float32 against bfloat16 autocast (AMX), for scoring and for generation.

Prints one JSON object. ``score`` is a forward pass over a batch of padded chat prompts (what reward
scoring and log-probability computation do); ``generate`` is greedy decoding of new tokens. The ratio
is float32 time / bfloat16 time (above 1: bf16 is faster). The largest absolute difference of the
log-softmax on the scoring batch shows what bf16 costs in precision.

    .venv/bin/python bench/generation_dtype.py [--batch 8] [--new-tokens 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def _best_of(repeats: int, fn) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import django

    django.setup()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from common.model_registry import model_path

    folder = model_path("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    prompts = [
        [{"role": "user", "content": f"Give me tip number {i} for writing clear Python code."}]
        for i in range(args.batch)
    ]
    texts = [
        tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)

    def score(bf16: bool) -> torch.Tensor:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(**inputs).logits
        return torch.log_softmax(logits.float(), dim=-1)

    def generate(bf16: bool) -> None:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            model.generate(
                **inputs,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )

    score(False), score(True)  # warm-up
    results: dict[str, object] = {
        "benchmark": "smollm2-135m cpu dtype",
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "prompt_tokens": int(inputs["input_ids"].shape[1]),
        "new_tokens": args.new_tokens,
    }
    for name, fn in (("score", score), ("generate", generate)):
        fp32 = _best_of(args.repeats, lambda fn=fn: fn(False))
        bf16 = _best_of(args.repeats, lambda fn=fn: fn(True))
        results[name] = {
            "float32_s": round(fp32, 4),
            "bfloat16_autocast_s": round(bf16, 4),
            "speedup_bf16": round(fp32 / bf16, 2),
        }
    diff = (score(False) - score(True)).abs().max().item()
    results["score"]["max_abs_logprob_diff"] = round(diff, 4)  # type: ignore[index]
    generated = args.batch * args.new_tokens
    for key in ("float32_s", "bfloat16_autocast_s"):
        results["generate"][key.replace("_s", "_tokens_per_s")] = round(  # type: ignore[index]
            generated / results["generate"][key],
            1,  # type: ignore[index]
        )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
