"""Building a rollout engine (``engine.RolloutEngine``) by the name a config gives: 'generate',
'static', 'llamacpp', 'vllm' or 'auto', and keeping it for the next call with the same policy (a
compiled decode step, a started vLLM and llama.cpp's pushed weights live as long as the policy
does)."""

from __future__ import annotations

from typing import Any

from training.inference.engine import (
    ENGINES,
    EngineUnavailable,
    RolloutEngine,
    static_supported,
)


def choose_engine(name: str, policy: Any) -> str:
    """The engine ``name`` stands for with this policy; any name but ``auto`` is itself (checked
    when the engine is built). ``auto`` is ``static`` for a plain Llama-family policy on the CPU,
    where bench/bench_rollout.py measured it the fastest at the 64 rows of a GRPO step (1.08x
    ``generate`` in fp32, 1.17x in bf16; ``llamacpp`` is ahead for one to 16 rows, bench/README.md,
    issue 37), and ``generate`` elsewhere: for LoRA-wrapped or other models (``static_supported``)
    and on GPUs, where the static engine has not been measured yet (bench/gpu_check.py)."""
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {name!r}")
    if name != "auto":
        return name
    if static_supported(policy) is not None:
        return "generate"
    device = next(policy.parameters()).device
    return "static" if device.type == "cpu" else "generate"


def make_engine(name: str, policy: Any, **options: Any) -> RolloutEngine:
    """The engine ``name`` (``choose_engine``) for ``policy``; ``options`` go to its constructor.
    Raises EngineUnavailable with the reason when it cannot run here."""
    chosen = choose_engine(name, policy)
    if chosen == "generate":
        from training.inference.engine_generate import GenerateEngine

        return GenerateEngine(**options)
    if chosen in ("static", "llamacpp"):
        reason = static_supported(policy)
        if reason is not None:
            raise EngineUnavailable(
                f"engine {chosen!r} cannot run this policy: {reason}; use "
                "engine 'generate' (or 'auto', which falls back to it)"
            )
        if chosen == "static":
            from training.inference.engine_static import StaticEngine

            return StaticEngine(**options)
        from training.inference.engine_llamacpp import LlamaCppEngine

        return LlamaCppEngine(**options)
    from training.inference.engine_vllm import VLLMEngine

    return VLLMEngine(policy, **options)


_ENGINES: dict[tuple[str, int, tuple[tuple[str, Any], ...]], tuple[Any, RolloutEngine]] = {}


def engine_for(name: str, policy: Any, **options: Any) -> RolloutEngine:
    """``make_engine``, kept for the next call with the same policy and options (a compiled decode
    step and a started vLLM live as long as the policy does)."""
    import weakref

    key = (choose_engine(name, policy), id(policy), tuple(sorted(options.items())))
    held = _ENGINES.get(key)
    if held is not None and held[0]() is policy:
        return held[1]
    for stale in [k for k, (ref, _) in _ENGINES.items() if ref() is None]:
        del _ENGINES[stale]
    engine = make_engine(name, policy, **options)
    _ENGINES[key] = (weakref.ref(policy), engine)
    return engine
