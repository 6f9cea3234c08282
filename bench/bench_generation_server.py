"""Eval-round generation through llama.cpp's OpenAI-compatible server against the in-process path.

The same prompts (chat turns of the eval rounds' kind), greedy, the same ``max_new_tokens``:

- ``in_process``: ``training.inference.generation.ChatGenerator`` on SmolLM2-135M-Instruct as
  ``fetch_models`` converts it (float32 Hugging Face weights, batches of 8, what ``round_generate``
  runs on a CPU gpu-queue worker);
- ``server``: ``training.inference.chat_client.ChatClient`` (what a round with an endpoint runs) against
  ``python -m llama_cpp.server`` serving the Q4_1 GGUF the same model comes from (4-bit weights).

Both decode greedily and stop at the end-of-turn token or ``max_new_tokens``, so the two models (fp32
against its 4-bit quantisation) may stop at different lengths: the generated tokens are counted on
each side and the ratio is given both in prompts per second and in tokens per second. A warm-up
prompt runs first on each side (model load and server start are not timed). Prints one JSON object.

    .venv/bin/python bench/bench_generation_server.py [--prompts 16] [--new-tokens 64]
        [--threads 2] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

TOPICS = [
    "writing clear Python code", "sleeping better", "learning a language", "saving money",
    "running a meeting", "cooking rice", "reviewing a pull request", "starting to run",
]  # fmt: skip


def cpu_flags() -> list[str]:
    text = Path("/proc/cpuinfo").read_text()
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split())
    return sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma"})


def prompts(n: int) -> list[list[dict[str, str]]]:
    return [
        [{"role": "user", "content": f"Give me tip number {k // len(TOPICS) + 1} for "
                                     f"{TOPICS[k % len(TOPICS)]}."}]
        for k in range(n)
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2, help="torch and llama.cpp threads")
    parser.add_argument("--concurrency", type=int, default=2, help="client requests in flight")
    args = parser.parse_args()

    import django

    django.setup()
    import torch

    from common.model_registry import model_path
    from tests.helpers.llama_server import (
        SERVED_MODEL,
        smollm2_gguf,
        start_llama_server,
        stop_llama_server,
    )
    from training.inference.chat_client import ChatClient, EndpointConfig
    from training.inference.generation import ChatGenerator, SamplingConfig

    torch.set_num_threads(args.threads)
    conversations = prompts(args.prompts)
    warm = [[{"role": "user", "content": "Say hello."}]]

    generator = ChatGenerator(model_path("smollm2-135m-instruct"), device="cpu")
    config = SamplingConfig(max_new_tokens=args.new_tokens, temperature=0.0, repetition_penalty=1.0)
    generator.generate(warm, config)
    start = time.perf_counter()
    local = generator.generate(conversations, config)
    local_s = time.perf_counter() - start
    del generator

    with tempfile.TemporaryDirectory() as folder:
        gguf = smollm2_gguf(Path(folder))
        process, base_url = start_llama_server(
            gguf, Path(folder) / "server.log", threads=args.threads
        )
        try:
            client = ChatClient(
                EndpointConfig(
                    base_url=base_url, model=SERVED_MODEL, max_concurrency=args.concurrency,
                    timeout_s=600,
                )
            )  # fmt: skip
            client.completions(warm, max_tokens=args.new_tokens, temperature=0.0)
            start = time.perf_counter()
            served = client.completions(conversations, max_tokens=args.new_tokens, temperature=0.0)
            server_s = time.perf_counter() - start
        finally:
            stop_llama_server(process)

    local_tokens = sum(g.n_tokens for g in local)
    server_tokens = sum(c.n_tokens for c in served)
    load = os.getloadavg()[0]
    result = {
        "benchmark": "eval-round generation: llama.cpp server vs in-process transformers",
        "model": "SmolLM2-135M-Instruct",
        "prompts": args.prompts,
        "max_new_tokens": args.new_tokens,
        "decoding": "greedy",
        "threads": args.threads,
        "cpu_flags": cpu_flags(),
        "load_average_1m": round(load, 2),
        "in_process": {
            "precision": "float32 (HF weights de-quantised from the Q4_1 GGUF), CPU",
            "batch_size": 8,
            "seconds": round(local_s, 3),
            "prompts_per_s": round(args.prompts / local_s, 3),
            "tokens": local_tokens,
            "tokens_per_s": round(local_tokens / local_s, 2),
        },
        "server": {
            "precision": "Q4_1 GGUF (4-bit weights), llama.cpp CPU, built with GGML_NATIVE=OFF "
            "(AVX2/FMA/F16C)",
            "engine": "llama-cpp-python[server]",
            "client_concurrency": args.concurrency,
            "seconds": round(server_s, 3),
            "prompts_per_s": round(args.prompts / server_s, 3),
            "tokens": server_tokens,
            "tokens_per_s": round(server_tokens / server_s, 2),
        },
        "ratio_prompts_per_s_server_over_in_process": round(local_s / server_s, 3),
        "ratio_tokens_per_s_server_over_in_process": round(
            (server_tokens / server_s) / (local_tokens / local_s), 3
        ),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
