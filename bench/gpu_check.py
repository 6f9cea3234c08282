"""The scripted GPU check of issue 37, for whenever a CUDA machine is lent to us (well under 8
minutes on one H200). Prints one JSON object; on a machine without CUDA it prints a skip line and
exits 0.

Sections (each one's failure is recorded in its place and the others still run):

- ``rollouts``: 16 prompts x G 4 = 64 rows, 128 new tokens sampled at temperature 1.0 with EOS
  ignored, bfloat16, through the ``generate`` engine (transformers), the ``static`` engine (eager
  and with ``torch.compile``d decode step) and the ``vllm`` engine when vLLM is installed
  (colocated, ``gpu_memory_utilization`` 0.3, weights pushed once before the timed call): tokens/s
  and peak CUDA memory of each, after a warm-up call.
- ``attention``: one forward and backward of the policy on 16 x 512 tokens, bfloat16, with
  ``attn_implementation`` ``sdpa`` against ``flash_attention_2`` (when flash-attn is installed):
  milliseconds per step, best of 5.
- ``zero2_grpo``: one GRPO step (4 prompts x G 4, 32 new tokens) under DeepSpeed ZeRO-2 on one
  GPU (``torchrun --nproc_per_node 1 -m training.launch``) when deepspeed is installed: exit status,
  seconds and the logged step.

The policy is SmolLM2-135M-Instruct from the model registry when it is there, else a randomly
initialised Llama of SmolLM2-135M's shape (the speed is the same; the tokens mean nothing), saved
to a temporary folder so vLLM can load it; ZeRO-2 GRPO then uses the tests' tiny ChatML tokenizer
and that shape with its vocabulary.

    python bench/gpu_check.py [--sections rollouts attention zero2_grpo] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

SMOLLM2_SHAPE = {
    "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
    "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
}  # fmt: skip


def _registry_model() -> Path | None:
    try:
        import django

        django.setup()
        from common.model_registry import model_path

        return model_path("smollm2-135m-instruct")
    except Exception:
        return None


def _random_model(folder: Path, vocab_size: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, bos_token_id=1, eos_token_id=2, **SMOLLM2_SHAPE)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    return folder


def _timed(fn, sync) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def rollouts(folder: Path, new_tokens: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from training.inference.engine import SamplingSettings
    from training.inference.engine_generate import GenerateEngine
    from training.inference.engine_static import StaticEngine

    device = torch.device("cuda")
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16).to(device)
    model.eval()
    prompts = torch.randint(3, 1000, (16, 48), generator=torch.Generator().manual_seed(0))
    ids = prompts.repeat_interleave(4, dim=0)
    mask = torch.ones_like(ids)
    engines = {"generate": lambda: GenerateEngine(), "static": lambda: StaticEngine()}
    engines["static_compiled"] = lambda: StaticEngine(compile=True)
    if importlib.util.find_spec("vllm") is not None:
        from training.inference.engine_vllm import VLLMEngine

        engines["vllm"] = lambda: VLLMEngine(
            model, model_path=str(folder), max_model_len=48 + new_tokens + 8
        )
    report: dict = {"rows": ids.shape[0], "new_tokens": new_tokens, "precision": "bfloat16"}
    for name, build in engines.items():
        try:
            engine = build()
            warm = SamplingSettings(max_new_tokens=8, temperature=1.0, seed=0)
            engine.generate(model, ids, mask, warm)
            torch.cuda.reset_peak_memory_stats(device)
            settings = SamplingSettings(max_new_tokens=new_tokens, temperature=1.0, seed=1)
            seconds = _timed(
                lambda e=engine, s=settings: e.generate(model, ids, mask, s), torch.cuda.synchronize
            )
            report[name] = {
                "tokens_per_s": round(ids.shape[0] * new_tokens / seconds, 1),
                "seconds": round(seconds, 3),
                "peak_cuda_bytes": torch.cuda.max_memory_allocated(device),
            }
        except Exception as error:
            report[name] = {"error": f"{type(error).__name__}: {error}"[:500]}
    if "vllm" not in engines:
        report["vllm"] = {"skipped": "vLLM is not installed"}
    return report


def attention(folder: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    report: dict = {"batch": "16 x 512 tokens, forward + backward, bfloat16"}
    kinds = ["sdpa"] + (["flash_attention_2"] if importlib.util.find_spec("flash_attn") else [])
    ids = torch.randint(3, 1000, (16, 512), device="cuda")
    for kind in kinds:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(folder), dtype=torch.bfloat16, attn_implementation=kind
            ).cuda()

            def step(m=model) -> None:
                m(input_ids=ids, labels=ids).loss.backward()
                m.zero_grad(set_to_none=True)

            step()
            best = min(_timed(step, torch.cuda.synchronize) for _ in range(5))
            report[kind] = {"ms_per_step": round(best * 1000, 2)}
            del model
            torch.cuda.empty_cache()
        except Exception as error:
            report[kind] = {"error": f"{type(error).__name__}: {error}"[:500]}
    if len(kinds) == 1:
        report["flash_attention_2"] = {"skipped": "flash-attn is not installed"}
    return report


def zero2_grpo(work: Path, folder: Path | None) -> dict:
    if importlib.util.find_spec("deepspeed") is None:
        return {"skipped": "deepspeed is not installed"}
    from tests.helpers.tiny_models import PAIRS, chatml_tokenizer, write_jsonl

    if folder is None:
        tokenizer_dir = chatml_tokenizer(
            work / "tokenizer", [t for row in PAIRS for t in row] * 4, vocab_size=320
        )
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        folder = _random_model(work / "grpo-policy", len(tokenizer))
        tokenizer.save_pretrained(str(folder))
    data = write_jsonl(work / "prompts.jsonl", [{"prompt": p} for p, _, _ in PAIRS])
    config = {
        "kind": "grpo", "model": str(folder), "data": str(data), "output_dir": str(work / "run"),
        "rewards": ['length_penalty {"target": 40}'], "batch_size": 4, "group_size": 4,
        "max_new_tokens": 32, "max_steps": 1, "kl_coef": 0.0, "eval_prompts": 0,
        "checkpoint_every": 0, "device": "cuda", "bf16": True, "deepspeed": "zero2",
    }  # fmt: skip
    path = work / "grpo.json"
    path.write_text(json.dumps(config))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1",
         "-m", "training.launch", str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return {
        "exit_status": done.returncode,
        "seconds": round(time.perf_counter() - start, 1),
        "last_line": json.loads(lines[-1]) if lines else None,
        "stderr_tail": done.stderr[-800:] if done.returncode else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sections", nargs="+", default=["rollouts", "attention", "zero2_grpo"],
        choices=["rollouts", "attention", "zero2_grpo"],
    )  # fmt: skip
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: skipped, no CUDA device here (nothing measured)")
        return 0
    report: dict = {
        "benchmark": "gpu_check (issue 37)",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "installed": {
            name: importlib.util.find_spec(name) is not None
            for name in ("vllm", "flash_attn", "deepspeed")
        },
    }
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        registry = _registry_model()
        folder = registry or _random_model(work / "policy", 49152)
        report["policy"] = str(registry) if registry else "random SmolLM2-135M shape"
        sections = {
            "rollouts": lambda: rollouts(folder, args.new_tokens),
            "attention": lambda: attention(folder),
            "zero2_grpo": lambda: zero2_grpo(work, registry),
        }
        for name in args.sections:
            start = time.perf_counter()
            try:
                report[name] = sections[name]()
            except Exception:
                report[name] = {"error": traceback.format_exc()[-1500:]}
            report[name]["section_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
