"""What every bench of ours against a peer (TRL, or another way of ours) shares: the common
options and the work folder, the worker process per side, the alternating rounds, the fastest
round, the ratio report, the CPU's flags and the precisions to run, the TRL settings and the demo
inputs.

Each side runs in a worker process of its own (the same script, told which side to run), so its
peak resident memory is its own. The parent alternates the sides for ``--rounds`` rounds, so the
slow spells of a shared machine hit both, and keeps each side's fastest successful round: other work
only ever slows a run down, so the fastest is the least disturbed. Every round's rate (or the end of
its error) is listed beside it.

Scripts run from the repository root have ``bench/`` on ``sys.path`` and ``import side_by_side``;
importing it puts the repository root on the path and points Django at its settings (the workers
load models through the registry). Nothing here imports torch or TRL at import time, so a script's
``--help`` and its parent process stay light.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

T = TypeVar("T")
SIDES = ("ours", "trl")
# The CPU features that decide which precision is fast here.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
# The vector extensions that decide how fast NumPy's kernels run (the pure-maths benches print them).
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni")
BF16_HARDWARE = frozenset({"avx512_bf16", "amx_bf16"})

# The TRL settings every bench against TRL shares: CPU only, no gradient checkpointing, a log line
# every step, nothing saved or reported, seed 0 (the precision is set per run).
TRL_CPU = {
    "fp16": False,
    "use_cpu": True,
    "gradient_checkpointing": False,
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": "none",
    "seed": 0,
    "disable_tqdm": True,
}

# --------------------------------------------------------------------------- inputs (both sides)


def model_folder(name: str = "smollm2-135m-instruct") -> str:
    """The registry's folder of the model ``name`` (sets Django up first)."""
    import django

    django.setup()
    from common.model_registry import model_path

    return str(model_path(name))


def write_pairs(path: Path, n_pairs: int) -> int:
    """Demo comparisons with a majority judgement -> TRL-style rows {prompt, chosen, rejected},
    chosen = the majority's response; returns how many were written (at most ``n_pairs``)."""
    rows = []
    for line in (ROOT / "demo" / "comparisons.jsonl").read_text().splitlines():
        row = json.loads(line)
        votes = [j["choice"] for j in row.get("judgements", [])]
        a, b = votes.count("a"), votes.count("b")
        if a == b:
            continue
        chosen, rejected = (
            (row["response_a"], row["response_b"])
            if a > b
            else (row["response_b"], row["response_a"])
        )
        rows.append({"prompt": row["prompt"], "chosen": chosen, "rejected": rejected})
        if len(rows) == n_pairs:
            break
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def write_prompts(path: Path, n_prompts: int) -> int:
    """The first ``n_prompts`` demo prompts as rows {prompt}; returns how many were written."""
    lines = (ROOT / "demo" / "prompts.jsonl").read_text().splitlines()[:n_prompts]
    rows = [{"prompt": json.loads(line)["prompt"]} for line in lines]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def as_messages(prompt: str | list[dict[str, str]]) -> list[dict[str, str]]:
    """A prompt as TRL's conversational format wants it: a text becomes one user message."""
    return prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]


def peak_rss_bytes() -> int:
    """This process's peak resident set so far, in bytes (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --------------------------------------------------------------------------- the parent


def add_pair_options(
    parser: argparse.ArgumentParser, *, pairs: int, batch: int, max_length: int
) -> None:
    """``--pairs``, ``--batch`` and ``--max-length`` of the benches that train on demo pairs (as
    ``write_pairs`` writes them), with these defaults."""
    parser.add_argument("--pairs", type=int, default=pairs, help="demo pairs with a majority")
    parser.add_argument("--batch", type=int, default=batch, help="pairs (or examples) per step")
    parser.add_argument("--max-length", type=int, default=max_length, help="tokens per sequence")


def parse_options(
    parser: argparse.ArgumentParser,
    *,
    precision: str,
    precisions: Sequence[str],
    rounds: int,
    workers: Collection[str] = SIDES,
) -> argparse.Namespace:
    """Adds the options every script against TRL takes, then parses the command line:
    ``--precision`` (one of ``precisions``, default ``precision``), ``--rounds`` (default
    ``rounds``), ``--skip-trl``, ``--keep``, and the hidden ones a parent hands its worker:
    ``--worker`` (one of ``workers``), ``--data``, ``--work``."""
    parser.add_argument("--precision", choices=tuple(precisions), default=precision)
    parser.add_argument(
        "--rounds", type=int, default=rounds, help="alternating runs per side; the fastest kept"
    )
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work folder under var/")
    parser.add_argument("--worker", choices=tuple(workers), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    return parser.parse_args()


def run_script(
    args: argparse.Namespace,
    *,
    name: str,
    workers: Mapping[str, Callable[[argparse.Namespace], dict]],
    bench: Callable[[argparse.Namespace, Path], dict],
) -> dict | None:
    """The rest of a script's ``main``. In a worker (``--worker SIDE``): runs that side and prints
    its result as one JSON line; returns None. In the parent: ``bench(args, work)`` in a new work
    folder (``work_folder(name)``), prints its report as indented JSON and returns it."""
    if args.worker:
        print(json.dumps(workers[args.worker](args)))
        return None
    with work_folder(name, keep=args.keep) as work:
        report = bench(args, work)
    print(json.dumps(report, indent=2))
    return report


@contextlib.contextmanager
def work_folder(name: str, *, keep: bool) -> Iterator[Path]:
    """A new folder ``var/bench-NAME-*`` for the run's data and trained models (about 0.5 GB a
    run of SmolLM2), removed at the end unless ``keep``."""
    folder = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir=ROOT / "var"))
    try:
        yield folder
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def forwarded(args: argparse.Namespace, *names: str) -> list[str]:
    """``--name value`` for each attribute of ``args`` in ``names`` that is set (underscores
    written as dashes): the parent's settings as its worker's command line."""
    options = []
    for name in names:
        value = getattr(args, name)
        if value is not None:
            options += [f"--{name.replace('_', '-')}", str(value)]
    return options


def run_worker(script: str | Path, *arguments: str, error_chars: int = 2000) -> dict:
    """Run ``python script *arguments`` in its own process (so its peak memory is its own); returns
    the last JSON object it printed, or ``{"error": <the last error_chars of its stderr>,
    "exit_status": <its exit status>}`` when it failed or printed none."""
    done = subprocess.run(
        [sys.executable, str(script), *arguments], capture_output=True, text=True, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": done.stderr[-error_chars:], "exit_status": done.returncode}
    return json.loads(lines[-1])


def alternate_rounds(
    run_side: Callable[[str], dict],
    *,
    rounds: int,
    sides: Sequence[str] = SIDES,
    skip: Collection[str] = (),
    after_round: Callable[[], None] | None = None,
) -> dict[str, list[dict]]:
    """``rounds`` rounds, each running every side of ``sides`` in turn (those in ``skip`` never):
    ``{side: [its result in each round]}``, a skipped side with an empty list."""
    results: dict[str, list[dict]] = {side: [] for side in sides}
    for _ in range(rounds):
        for side in sides:
            if side not in skip:
                results[side].append(run_side(side))
        if after_round is not None:
            after_round()
    return results


def best_round(runs: Sequence[dict], rate: str) -> dict:
    """The run with the highest ``rate`` among those that succeeded (no ``error``); {} when none did."""
    return max((r for r in runs if "error" not in r), key=lambda r: r[rate], default={})


def rates_by_round(
    results: Mapping[str, Sequence[dict]], rate: str, error_chars: int = 300
) -> dict[str, list[float | str]]:
    """Each side's rounds in order: its ``rate``, or the last ``error_chars`` of its error."""
    return {
        side: [r[rate] if "error" not in r else r["error"][-error_chars:] for r in runs]
        for side, runs in results.items()
    }


def compare(
    ours: dict,
    peer: dict,
    *,
    ratios: Mapping[str, str | tuple[str, str]],
    differences: Mapping[str, str] | None = None,
    same: Mapping[str, str] | None = None,
) -> dict:
    """Ours against the peer, each from its best round; {} when either has no successful round.

    ``ratios``: name -> key, or (our key, the peer's key): ours / the peer's. ``differences``: name
    -> key: |ours - the peer's|, the largest over the elements where the values are lists (of equal
    length). ``same``: name -> key: whether both hold the same value.
    """
    if not ours or not peer:
        return {}
    report: dict = {}
    for name, keys in ratios.items():
        mine, theirs = (keys, keys) if isinstance(keys, str) else keys
        report[name] = ours[mine] / peer[theirs]
    for name, key in (differences or {}).items():
        a, b = ours[key], peer[key]
        if isinstance(a, list):
            report[name] = max(abs(x - y) for x, y in zip(a, b, strict=True))
        else:
            report[name] = abs(a - b)
    for name, key in (same or {}).items():
        report[name] = ours[key] == peer[key]
    return report


def run_sides(
    args: argparse.Namespace,
    run_side: Callable[[str], dict],
    *,
    rate: str,
    best_by: str | None = None,
    ratios: Mapping[str, str | tuple[str, str]] | None = None,
    differences: Mapping[str, str] | None = None,
    same: Mapping[str, str] | None = None,
    error_chars: int = 300,
    after_round: Callable[[], None] | None = None,
) -> dict:
    """Ours and TRL (``run_side("ours")``, ``run_side("trl")``) alternated for ``args.rounds``
    rounds, TRL left out with ``args.skip_trl`` (the options ``parse_options`` adds):
    ``{"ours": best, "trl": best, **compare(...), "rounds": rates_by_round(...)}``.

    The best round is the one with the highest ``best_by`` (default ``rate``); ``ratios`` defaults
    to ``speedup`` (``rate``, ours / TRL) and ``peak_rss_ratio``.
    """
    results = alternate_rounds(
        run_side,
        rounds=args.rounds,
        skip=("trl",) if args.skip_trl else (),
        after_round=after_round,
    )
    ours, trl = (best_round(results[side], best_by or rate) for side in SIDES)
    ratios = ratios if ratios is not None else {"speedup": rate, "peak_rss_ratio": "peak_rss_bytes"}
    return {
        "ours": ours,
        "trl": trl,
        **compare(ours, trl, ratios=ratios, differences=differences, same=same),
        "rounds": rates_by_round(results, rate, error_chars),
    }


# --------------------------------------------------------------------------- the machine


def _cpuinfo_flags() -> set[str]:
    """The flags /proc/cpuinfo lists for the first CPU (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def cpu_flags() -> dict[str, bool]:
    """Which of CPU_FLAGS this CPU has (all False where /proc/cpuinfo cannot be read)."""
    found = _cpuinfo_flags()
    return {flag: flag in found for flag in CPU_FLAGS}


def cpu_flags_present(names: Collection[str] = (*CPU_FLAGS, "fma")) -> list[str]:
    """Those of ``names`` (by default CPU_FLAGS and fma) that this CPU has, sorted."""
    return sorted(_cpuinfo_flags() & set(names))


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    line = next((line for line in text.splitlines() if line.startswith("model name")), "")
    return line.partition(":")[2].strip() or platform.processor()


def best_of(function: Callable[[], T], repeat: int) -> tuple[float, T]:
    """Run ``function`` ``repeat`` times; the fastest wall time in seconds and the last result
    (other work on a shared machine only ever slows a run down)."""
    best, result = float("inf"), None
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def precisions(choice: str, flags: Collection[str] = ()) -> tuple[str, ...]:
    """The precisions to run for ``--precision choice``: "both" is fp32 then bf16; "auto" adds bf16
    only where ``flags`` (present CPU flags) include bfloat16 hardware; else the one named."""
    if choice == "auto":
        return ("fp32", "bf16") if BF16_HARDWARE & set(flags) else ("fp32",)
    return ("fp32", "bf16") if choice == "both" else (choice,)
