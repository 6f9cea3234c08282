"""Rollout generation on SmolLM2-135M-Instruct: transformers ``generate`` (the ``generate`` engine,
what the recipes ran before issue 37: shared-prompt prefill and inverse-CDF sampling) against the
static engine (``training.inference.engine_static``: preallocated KV cache, continuous batching),
and llama.cpp's Q4_1 GGUF in one stream when ``llama_cpp`` is importable.

Each configuration (engine x precision x batch) runs in its own worker process, so its peak
resident memory is its own: distinct chat prompts, sampling at temperature 1.0 (top-p 1.0), 128
new tokens with EOS ignored (every row generates them all), after a 16-token warm-up of the same
batch. Precisions: float32, and bfloat16 autocast (the recipes' ``bf16``; the static engine then
decodes from a bfloat16 copy of the weights) where the CPU has it natively (AVX512-BF16 or AMX).
Tokens per second = batch x 128 / seconds of the timed call. Prints one JSON object with the CPU's
flags, the threads and the load average before and after; ``--repeats`` runs each configuration
that many times and keeps the fastest (other work only slows a run down).

    .venv/bin/python bench/bench_rollout.py [--batches 1 16] [--new-tokens 128] [--threads 2]
        [--repeats 1] [--compile] [--static-threads N] [--skip-llama-cpp]

``--compile`` adds the static engine with its decode step through ``torch.compile``;
``--static-threads N`` the static engine running its calls on N intra-op threads (``threads``).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import side_by_side

TOPICS = [
    "writing clear Python code", "sleeping better", "learning a language", "saving money",
    "running a meeting", "cooking rice", "reviewing a pull request", "starting to run",
]  # fmt: skip


def _prompts(tokenizer, batch: int):
    """``batch`` distinct chat prompts, left-padded: (input_ids, attention) [batch, W]."""
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Give me tip number {k // len(TOPICS) + 1} for "
                                         f"{TOPICS[k % len(TOPICS)]}."}],
            add_generation_prompt=True, tokenize=False,
        )
        for k in range(batch)
    ]  # fmt: skip
    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return encoded["input_ids"], encoded["attention_mask"]


def run_engine(args: argparse.Namespace) -> dict:
    """One configuration in this process: the timed call's tokens/s and this process's peak RSS."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.inference.engine import SamplingSettings
    from training.inference.engine_generate import GenerateEngine
    from training.inference.engine_llamacpp import LlamaCppEngine
    from training.inference.engine_static import StaticEngine

    torch.set_num_threads(args.threads)
    folder = side_by_side.model_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids, mask = _prompts(tokenizer, args.batch)
    if args.worker == "generate":
        engine = GenerateEngine()
    elif args.worker == "llamacpp":
        engine = LlamaCppEngine()
    else:
        engine = StaticEngine(
            compile=args.worker == "static_compiled",
            threads=args.static_threads if args.worker == "static_threads" else None,
        )
    bf16 = args.precision == "bf16"

    def call(tokens: int) -> float:
        settings = SamplingSettings(max_new_tokens=tokens, temperature=1.0, seed=0)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = engine.generate(model, ids, mask, settings)
        seconds = time.perf_counter() - start
        assert all(len(t) == tokens for t in out.tokens), "EOS must be ignored"
        return seconds

    call(16)  # warm-up (and the compile, with --compile)
    seconds = min(call(args.new_tokens) for _ in range(args.repeats))
    return {
        "tokens_per_s": round(args.batch * args.new_tokens / seconds, 2),
        "seconds": round(seconds, 3),
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
    }


def run_llama_cpp(args: argparse.Namespace) -> dict:
    """llama.cpp's Q4_1 SmolLM2 in one stream: 128 tokens sampled at temperature 1.0, EOS
    ignored (the token loop is ours), after a 16-token warm-up."""
    import tempfile
    from pathlib import Path

    import llama_cpp

    from tests.helpers.llama_server import smollm2_gguf

    side_by_side.model_folder()  # Django settings for the wheel's location
    with tempfile.TemporaryDirectory() as folder:
        gguf = smollm2_gguf(Path(folder))
        llm = llama_cpp.Llama(
            model_path=str(gguf), n_threads=args.threads, n_ctx=512, verbose=False, seed=0
        )
        prompt = llm.tokenize(b"<|im_start|>user\nGive me tip number 1 for saving money.<|im_end|>\n"
                              b"<|im_start|>assistant\n", special=True)  # fmt: skip

        def stream(n: int) -> float:
            llm.reset()
            start = time.perf_counter()
            for count, _ in enumerate(llm.generate(prompt, temp=1.0, top_p=1.0, top_k=0), 1):
                if count == n:
                    break
            return time.perf_counter() - start

        stream(16)
        seconds = min(stream(args.new_tokens) for _ in range(args.repeats))
        return {
            "tokens_per_s": round(args.new_tokens / seconds, 2),
            "seconds": round(seconds, 3),
            "peak_rss_bytes": side_by_side.peak_rss_bytes(),
            "precision": "Q4_1 GGUF",
            "llama_cpp_version": llama_cpp.__version__,
        }


def _worker_options(args: argparse.Namespace, batch: int, precision: str) -> list[str]:
    return [
        "--batch", str(batch), "--precision", precision, "--threads", str(args.threads),
        "--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats),
        "--static-threads", str(args.static_threads or 0),
    ]  # fmt: skip


def bench(args: argparse.Namespace) -> dict:
    """Every configuration in its worker; the report with static / generate ratios."""
    import importlib.util

    import torch

    from training.inference.engine import cpu_flags, native_bf16

    precisions = ["fp32"] + (["bf16"] if native_bf16(torch.device("cpu")) else [])
    engines = ["generate", "static"] + (["static_compiled"] if args.compile else [])
    engines += ["static_threads"] if args.static_threads else []
    llama_cpp = importlib.util.find_spec("llama_cpp") is not None
    engines += ["llamacpp"] if llama_cpp else []
    if args.engines:
        engines = ["generate", *(e for e in engines[1:] if e in args.engines)]
    report: dict = {
        "benchmark": "rollout engines",
        "model": "smollm2-135m-instruct",
        "new_tokens": args.new_tokens,
        "sampling": "temperature 1.0, top-p 1.0, EOS ignored",
        "threads": args.threads,
        "cpu_flags": sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}),
        "load_average_at_start": os.getloadavg(),
        "runs": {},
    }
    for precision in precisions:
        for batch in args.batches:
            for engine in engines:
                key = f"{engine}/{precision}/batch{batch}"
                report["runs"][key] = side_by_side.run_worker(
                    __file__, "--worker", engine, *_worker_options(args, batch, precision)
                )
            base = report["runs"][f"generate/{precision}/batch{batch}"].get("tokens_per_s")
            for engine in engines[1:]:
                rate = report["runs"][f"{engine}/{precision}/batch{batch}"].get("tokens_per_s")
                if base and rate:
                    report["runs"][f"{engine}/{precision}/batch{batch}"]["x_generate"] = round(
                        rate / base, 2
                    )
    if not args.skip_llama_cpp and llama_cpp:
        report["runs"]["llama_cpp_q4_1/batch1"] = side_by_side.run_worker(
            __file__, "--worker", "llama_cpp", *_worker_options(args, 1, "q4_1")
        )
    report["load_average_at_end"] = os.getloadavg()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="also the compiled static engine")
    parser.add_argument(
        "--static-threads", type=int, default=0, help="also the static engine on N threads"
    )
    parser.add_argument("--skip-llama-cpp", action="store_true", help="no Q4_1 single stream")
    parser.add_argument(
        "--engines", nargs="+", help="only these beside generate (static, llamacpp, ...)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.new_tokens < 1 or args.repeats < 1 or min(args.batches) < 1:
        parser.error("--new-tokens, --repeats and --batches must be >= 1")
    if args.worker == "llama_cpp":
        print(json.dumps(run_llama_cpp(args)))
    elif args.worker:
        print(json.dumps(run_engine(args)))
    else:
        print(json.dumps(bench(args), indent=2))


if __name__ == "__main__":
    main()
