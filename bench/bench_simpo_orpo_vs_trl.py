"""SimPO and ORPO on SmolLM2-135M-Instruct: Concord's recipes against TRL's ``CPOTrainer``
(``loss_type="simpo"``, ``cpo_alpha=0``: SimPO itself, without CPO's NLL term) and ``ORPOTrainer``,
same model, pairs, batch, length, learning rate, beta / gamma / lambda and precision. Prints one
JSON object, then fails (exit 1) when the two sides did not compute the same thing.

Data: the first ``--pairs`` HH-RLHF harmless-base test pairs (``CONCORD_SHARED_DATA``, else
../shared/data) whose prompt and both answers fit ``--max-length`` without cutting; without that
file, the demo comparisons with a majority judgement (demo/comparisons.jsonl). Both tools train on
the same token ids: ours tokenises with its chat encoder; TRL is handed those ids (its ``tokenize_row``
replaced by one that lays them out as TRL's own does: prompt ids, full ids, labels -100 over the
prompt), because TRL's CPO/ORPO tokenisation appends a second ``<|im_end|>`` after the chat
template's ``<|im_end|>\\n``, one token per answer that the template does not have. TRL reads the
pairs in the order of our sampler (``train_sampling_strategy="sequential"`` over pairs written in
that order), so every step of both sides trains the same pairs.

Checks (printed under ``checks``; a failed one exits 1):

- average completion log-probabilities of the first batch (chosen and rejected) agree within 1e-3
  (fp32; bf16 within ``BF16_LOGP_TOLERANCE``: autocast rounds each matmul's inputs, and our packed
  batches and TRL's padded ones round different rows together);
- first-step loss: each side's logged loss against the value the loss formula gives from the
  check forward's log-probabilities (computed here with ``math``, not with either tool's loss).
  SimPO: mean over pairs of ln(1 + exp(gamma - beta (a_w - a_l))), a = average log-prob. It is
  ln 2 only where gamma = 0 *and* a_w = a_l: with no reference model nothing cancels the policy's
  own preference at initialisation, unlike DPO (whose first step is ln 2 because policy =
  reference). ORPO: with log odds(a) = a - ln(1 - e^a), L_OR = ln(1 + exp(-(odds_w - odds_l))),
  loss = NLL + lambda * mean L_OR (= NLL + lambda ln 2 when a_w = a_l). The NLL is where the tools
  differ by definition, and both are checked against their own: ours is the mean over pairs of -a_w
  (the chosen completion, per sequence), TRL's one token-level cross-entropy over the batch's whole
  chosen sequences, prompt included (``trl/experimental/orpo``: "computed over the full prompt and
  response"); that one is recomputed here from a plain forward of the same ids. The odds-ratio
  terms are compared directly;
- the same pairs and the same tokens trained (every sequence's prompt and completion tokens; TRL's
  padding is reported separately as the positions it computes).

Each side runs in its own subprocess (so its peak resident memory is its own); the check forward of
ours runs in a third. The sides alternate for ``--rounds`` rounds and each side's fastest round is
reported. Ours counts its training loop (model loading and tokenisation excluded), TRL the time of
``trainer.train()``. Where the CPU has AVX-512 BF16 or AMX, ``--precision auto`` runs fp32 and bf16
for both and compares each tool's best.

    .venv/bin/python bench/bench_simpo_orpo_vs_trl.py [--algo simpo|orpo|both] [--pairs 32]
        [--batch 8] [--max-length 256] [--precision auto|fp32|bf16|both] [--rounds 2] [--skip-trl]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import side_by_side
from bench_dpo_first_step import HH_FILE, hh_pairs

SEED = 0
SIMPO = {"beta": 2.0, "gamma": 0.5, "learning_rate": 1e-6}  # ours' defaults; TRL's gamma too
ORPO = {"lam": 0.1, "learning_rate": 8e-6}  # ours' and TRL's defaults
LOGP_TOLERANCE = 1e-3
LOSS_TOLERANCE = 1e-3
BF16_LOGP_TOLERANCE = 3e-2
BF16_LOSS_TOLERANCE = 3e-2


def _config(algo: str, data: str, output_dir: str, args: argparse.Namespace, bf16: bool):
    from training.recipes.config import ORPOConfig, SimPOConfig

    common = {
        "model": side_by_side.model_folder(),
        "data": data,
        "output_dir": output_dir,
        "batch_size": args.batch,
        "max_length": args.max_length,
        "epochs": 1,
        "seed": SEED,
        "bf16": bf16,
        "checkpoint_every": 0,
        "resume": False,
        "device": "cpu",
    }
    if algo == "simpo":
        return SimPOConfig(
            **common,
            learning_rate=SIMPO["learning_rate"],
            beta=SIMPO["beta"],
            gamma=SIMPO["gamma"],
        )
    return ORPOConfig(**common, learning_rate=ORPO["learning_rate"], orpo_lambda=ORPO["lam"])


# --------------------------------------------------------------------------- data (parent)


def candidate_rows(limit: int, work: Path) -> tuple[str, list[dict]]:
    """(source, TRL-style rows): HH-RLHF when its file is there, else the demo comparisons."""
    if HH_FILE.exists():
        return "hh-rlhf harmless-base test", hh_pairs(limit)
    demo = work / "demo.jsonl"
    side_by_side.write_pairs(demo, limit)
    return "demo comparisons", [json.loads(line) for line in demo.read_text().splitlines()]


def prepare_data(args: argparse.Namespace, work: Path) -> dict:
    """Writes ``pairs.jsonl`` (ours) and ``trl_rows.json`` (the same pairs' token ids, in our
    sampler's order, for TRL); returns what was written."""
    from training.recipes.data import EpochSampler
    from training.recipes.models import load_tokenizer
    from training.recipes.pair_policy import fit_dpo_pairs

    source, rows = candidate_rows(args.pairs * 20, work)
    tokenizer = load_tokenizer(side_by_side.model_folder())
    # Keep the pairs our encoder fits whole: neither tool then cuts anything.
    kept = []
    for row in rows:
        probe = work / "probe.jsonl"
        probe.write_text(json.dumps(row) + "\n")
        encoder, _ = fit_dpo_pairs(
            _config("simpo", str(probe), str(work / "fit"), args, False), tokenizer
        )
        if encoder.fit.truncated == 0 and encoder.fit.dropped == 0:
            kept.append(row)
        if len(kept) == args.pairs:
            break
    data = work / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in kept))
    encoder, pairs = fit_dpo_pairs(
        _config("simpo", str(data), str(work / "fit"), args, False), tokenizer
    )
    if encoder.fit.truncated or len(pairs) != len(kept):
        raise SystemExit("the kept pairs no longer fit whole: nothing to compare")
    sampler = EpochSampler(len(pairs), args.batch, SEED)
    order = [i for b in range(sampler.batches_per_epoch) for i in sampler.batch(0, b)]
    trl_rows = []
    for i in order:
        chosen, rejected = pairs[i]
        trl_rows.append(
            {
                "prompt": "",
                "chosen": "",
                "rejected": "",
                "prompt_ids": list(chosen.input_ids[: chosen.prompt_length]),
                "chosen_ids": list(chosen.input_ids),
                "rejected_ids": list(rejected.input_ids),
            }
        )
    (work / "trl_rows.json").write_text(json.dumps(trl_rows))
    return {
        "source": source,
        "pairs": len(pairs),
        "first_batch": order[: args.batch],
        "tokens": sum(len(c.input_ids) + len(r.input_ids) for c, r in pairs),
        "completion_tokens": sum(
            len(c.input_ids) - c.prompt_length + len(r.input_ids) - r.prompt_length
            for c, r in pairs
        ),
    }


# --------------------------------------------------------------------------- workers


def run_ours(args: argparse.Namespace) -> dict:
    import torch

    from training.recipes import train_orpo, train_simpo

    work = Path(args.work)
    output = Path(tempfile.mkdtemp(prefix=f"ours-{args.algo}-{args.precision}-", dir=work))
    config = _config(args.algo, args.data, str(output), args, args.precision == "bf16")
    start = time.perf_counter()
    result = (train_simpo if args.algo == "simpo" else train_orpo)(config)
    call_seconds = time.perf_counter() - start
    metrics = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    summary = result.summary
    shutil.rmtree(output, ignore_errors=True)  # the trained model: about 0.5 GB
    return {
        "pairs_trained": summary["pairs_trained"],
        "tokens_trained": summary["tokens_trained"],
        "pairs_per_second": summary["pairs_per_second"],
        "tokens_per_second": summary["tokens_per_second"],
        "train_seconds": summary["train_seconds"],
        "call_seconds": call_seconds,
        "packed": summary["packed"],
        "first_step": metrics[0],
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "torch_threads": torch.get_num_threads(),
    }


def run_check(args: argparse.Namespace) -> dict:
    """Our forward of the first batch as the recipe runs it (average log-probs of chosen and
    rejected, completion lengths), and the token-level cross-entropy over the chosen sequences'
    every token (TRL's ORPO NLL) from a plain forward of the same ids."""
    import torch

    from training.recipes.models import load_policy, load_tokenizer
    from training.recipes.pair_policy import fit_dpo_pairs, forward_pairs
    from training.recipes.runtime import autocast

    bf16 = args.precision == "bf16"
    config = _config(args.algo, args.data, str(Path(args.work) / "check"), args, bf16)
    device = torch.device("cpu")
    tokenizer = load_tokenizer(config.model)
    _, pairs = fit_dpo_pairs(config, tokenizer)
    batch = [pairs[i] for i in json.loads(args.first_batch)]
    policy, packed = load_policy(config.model, config, device)
    policy.eval()
    with torch.no_grad(), autocast(device, bf16):
        totals, lengths, _ = forward_pairs(
            policy, batch, packed=packed, pad_token_id=tokenizer.pad_token_id, device=device
        )
        nll_sum, nll_count = 0.0, 0
        for chosen, _ in batch:
            ids = torch.tensor([chosen.input_ids])
            logits = policy(input_ids=ids, use_cache=False).logits.float()
            nll = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum")
            nll_sum, nll_count = nll_sum + float(nll), nll_count + ids.shape[1] - 1
    average = (totals.float() / lengths.clamp(min=1)).tolist()
    m = len(batch)
    return {
        "chosen_avg_logps": average[:m],
        "rejected_avg_logps": average[m:],
        "completion_tokens": int(lengths.sum()),
        "chosen_full_sequence_nll": nll_sum / nll_count,
        "packed": packed,
    }


def _trl_trainer(args: argparse.Namespace):
    """TRL's trainer for ``args.algo``, its tokenisation replaced by our ids (module docstring)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    def given_ids(self, feature: dict, model=None) -> dict:
        prompt = feature["prompt_ids"]
        out = {"prompt_input_ids": prompt, "prompt_attention_mask": [1] * len(prompt)}
        for side in ("chosen", "rejected"):
            ids = feature[f"{side}_ids"]
            out[f"{side}_input_ids"] = ids
            out[f"{side}_attention_mask"] = [1] * len(ids)
            out[f"{side}_labels"] = [-100] * len(prompt) + ids[len(prompt) :]
        return out

    model_dir = side_by_side.model_folder()
    rows = json.loads((Path(args.work) / "trl_rows.json").read_text())
    common = {
        "output_dir": str(Path(args.work) / f"trl-{args.algo}-{args.precision}"),
        "per_device_train_batch_size": args.batch,
        "max_length": args.max_length,
        "num_train_epochs": 1,
        "bf16": args.precision == "bf16",
        "train_sampling_strategy": "sequential",
        **side_by_side.TRL_CPU,
    }
    if args.algo == "simpo":
        base, config = (
            CPOTrainer,
            CPOConfig(
                **common,
                loss_type="simpo",
                cpo_alpha=0.0,
                beta=SIMPO["beta"],
                simpo_gamma=SIMPO["gamma"],
                learning_rate=SIMPO["learning_rate"],
            ),
        )
    else:
        base, config = (
            ORPOTrainer,
            ORPOConfig(**common, beta=ORPO["lam"], learning_rate=ORPO["learning_rate"]),
        )
    trainer_class = type(f"GivenIds{base.__name__}", (base,), {"tokenize_row": given_ids})
    return trainer_class(
        model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    ), len(rows)


def run_trl(args: argparse.Namespace) -> dict:
    import torch
    import trl

    trainer, n_pairs = _trl_trainer(args)
    data = trainer.train_dataset
    tokens = sum(len(r["chosen_input_ids"]) + len(r["rejected_input_ids"]) for r in data)
    positions = 0  # what the padded batches compute: 2 x rows x the longest
    for start in range(0, len(data), args.batch):
        rows = [data[i] for i in range(start, min(start + args.batch, len(data)))]
        width = max(len(r[k]) for r in rows for k in ("chosen_input_ids", "rejected_input_ids"))
        positions += 2 * len(rows) * width
    check = trainer.data_collator([data[i] for i in range(min(args.batch, len(data)))])
    with torch.no_grad(), trainer.accelerator.autocast():
        chosen, rejected, _, _, nll = trainer.concatenated_forward(trainer.model, check)[:5]
    completion_tokens = int((check["chosen_labels"][:, 1:] != -100).sum()) + int(
        (check["rejected_labels"][:, 1:] != -100).sum()
    )
    start = time.perf_counter()
    output = trainer.train()
    seconds = time.perf_counter() - start
    logged = [row for row in trainer.state.log_history if "loss" in row]
    return {
        "pairs_trained": n_pairs,
        "tokens_trained": tokens,
        "positions_computed": positions,
        "pairs_per_second": n_pairs / seconds,
        "tokens_per_second": tokens / seconds,
        "train_seconds": seconds,
        "trl_train_runtime": output.metrics.get("train_runtime"),
        "first_step": logged[0] if logged else None,
        "chosen_avg_logps": chosen.float().tolist(),
        "rejected_avg_logps": rejected.float().tolist(),
        "completion_tokens_first_batch": completion_tokens,
        "chosen_nll_first_batch": float(nll),
        "peak_rss_bytes": side_by_side.peak_rss_bytes(),
        "trl_version": trl.__version__,
        "torch_threads": torch.get_num_threads(),
    }


# --------------------------------------------------------------------------- checks (parent)


def log_odds(a: float) -> float:
    """log(p / (1 - p)) for p = e^a, a < 0."""
    return a - math.log(-math.expm1(a))


def expected_losses(algo: str, check: dict) -> dict:
    """The first-step losses the formulas give from our check forward (module docstring)."""
    pairs = list(zip(check["chosen_avg_logps"], check["rejected_avg_logps"], strict=True))
    if algo == "simpo":
        beta, gamma = SIMPO["beta"], SIMPO["gamma"]
        value = sum(math.log1p(math.exp(gamma - beta * (w - r))) for w, r in pairs) / len(pairs)
        return {"ours": value, "trl": value}
    odds_ratio = sum(math.log1p(math.exp(-(log_odds(w) - log_odds(r)))) for w, r in pairs) / len(
        pairs
    )
    ours_nll = -sum(w for w, _ in pairs) / len(pairs)
    return {
        "ours": ours_nll + ORPO["lam"] * odds_ratio,
        "trl": check["chosen_full_sequence_nll"] + ORPO["lam"] * odds_ratio,
        "odds_ratio_loss": odds_ratio,
        "ours_nll": ours_nll,
        "trl_nll": check["chosen_full_sequence_nll"],
    }


def run_checks(algo: str, precision: str, data: dict, check: dict, ours: dict, trl: dict) -> dict:
    """Each check as {value, limit, ok}; ``ok`` False for any that fails."""
    logp_tol = LOGP_TOLERANCE if precision == "fp32" else BF16_LOGP_TOLERANCE
    loss_tol = LOSS_TOLERANCE if precision == "fp32" else BF16_LOSS_TOLERANCE
    expected = expected_losses(algo, check)
    out: dict = {"expected_first_step_loss": expected}

    def near(name: str, a: float, b: float, limit: float) -> None:
        out[name] = {"a": a, "b": b, "difference": abs(a - b), "limit": limit}
        out[name]["ok"] = abs(a - b) <= limit

    def equal(name: str, a: int, b: int) -> None:
        out[name] = {"a": a, "b": b, "ok": a == b}

    if ours:
        near(
            "ours_first_step_loss_vs_formula",
            ours["first_step"]["loss"],
            expected["ours"],
            loss_tol,
        )
        equal("ours_pairs_vs_data", ours["pairs_trained"], data["pairs"])
        equal("ours_tokens_vs_data", ours["tokens_trained"], data["tokens"])
    if trl:
        near("trl_first_step_loss_vs_formula", trl["first_step"]["loss"], expected["trl"], loss_tol)
        ours_logps = check["chosen_avg_logps"] + check["rejected_avg_logps"]
        trl_logps = trl["chosen_avg_logps"] + trl["rejected_avg_logps"]
        worst = max(abs(a - b) for a, b in zip(ours_logps, trl_logps, strict=True))
        out["avg_logps_ours_vs_trl"] = {"max_abs_difference": worst, "limit": logp_tol}
        out["avg_logps_ours_vs_trl"]["ok"] = worst <= logp_tol
        equal("trl_pairs_vs_data", trl["pairs_trained"], data["pairs"])
        equal("trl_tokens_vs_data", trl["tokens_trained"], data["tokens"])
        equal(
            "completion_tokens_first_batch",
            check["completion_tokens"],
            trl["completion_tokens_first_batch"],
        )
        if algo == "orpo":
            near(
                "trl_nll_vs_plain_forward",
                trl["chosen_nll_first_batch"],
                expected["trl_nll"],
                loss_tol,
            )
            if ours:
                trl_or = -trl["first_step"]["log_odds_ratio"]
                ours_or = ours["first_step"]["odds_ratio_loss"]
                near("odds_ratio_loss_ours_vs_trl", ours_or, trl_or, loss_tol)
    return out


def failed(checks: dict) -> list[str]:
    return [k for k, v in checks.items() if isinstance(v, dict) and v.get("ok") is False]


# --------------------------------------------------------------------------- main


def _child(side: str, algo: str, precision: str, args: argparse.Namespace, first: list) -> dict:
    options = side_by_side.forwarded(args, "data", "work", "batch", "max_length")
    return side_by_side.run_worker(
        __file__, "--worker", side, "--precision", precision, "--algo", algo, *options,
        "--first-batch", json.dumps(first),
    )  # fmt: skip


def bench_algo(algo: str, args: argparse.Namespace, data: dict, precisions: tuple) -> dict:
    report: dict = {}
    for precision in precisions:
        check = _child("check", algo, precision, args, data["first_batch"])
        if "error" in check:
            raise SystemExit(f"{algo} {precision}: the check forward failed:\n{check['error']}")
        entry = side_by_side.run_sides(
            args,
            lambda side, precision=precision: _child(
                side, algo, precision, args, data["first_batch"]
            ),
            rate="pairs_per_second",
            error_chars=600,
            after_round=lambda precision=precision: print(
                json.dumps({algo: precision, "load_average": os.getloadavg()}), file=sys.stderr
            ),
        )
        entry["check_forward"] = check
        entry["checks"] = run_checks(algo, precision, data, check, entry["ours"], entry["trl"])
        report[precision] = entry
    done = {p: e for p, e in report.items() if e["ours"] and e["trl"]}
    if done:
        ours_p = max(done, key=lambda p: done[p]["ours"]["pairs_per_second"])
        trl_p = max(done, key=lambda p: done[p]["trl"]["pairs_per_second"])
        ours_best = done[ours_p]["ours"]["pairs_per_second"]
        trl_best = done[trl_p]["trl"]["pairs_per_second"]
        report["best"] = {
            "ours": {"precision": ours_p, "pairs_per_second": ours_best},
            "trl": {"precision": trl_p, "pairs_per_second": trl_best},
            "speedup": ours_best / trl_best,
        }
    return report


def bench(args: argparse.Namespace, work: Path) -> dict:
    """Each algorithm at each precision, both sides alternated for ``args.rounds`` rounds, and
    the checks; the report (its ``failed_checks`` lists what did not agree)."""
    args.work = str(work)
    args.data = str(work / "pairs.jsonl")
    flags = side_by_side.cpu_flags_present()
    import torch  # after the workers' early return: the parent only reads its thread count

    report: dict = {
        "benchmark": "simpo_orpo_vs_trl",
        "model": "smollm2-135m-instruct",
        "batch_size": args.batch,
        "max_length": args.max_length,
        "simpo": SIMPO,
        "orpo": ORPO,
        "cpu_count": os.cpu_count(),
        "cpu_flags": flags,
        "torch_threads": torch.get_num_threads(),
        "load_average_at_start": os.getloadavg(),
    }
    data = prepare_data(args, work)
    report["data"] = data
    runs = side_by_side.precisions(args.precision, flags)
    report["precisions"] = runs
    algos = ("simpo", "orpo") if args.algo == "both" else (args.algo,)
    problems = []
    for algo in algos:
        report[algo] = bench_algo(algo, args, data, runs)
        for precision in runs:
            problems += [
                f"{algo} {precision}: {name}" for name in failed(report[algo][precision]["checks"])
            ]
            for side in ("ours", "trl"):
                if not report[algo][precision][side] and not (side == "trl" and args.skip_trl):
                    problems.append(f"{algo} {precision}: every {side} run failed")
    report["load_average_at_end"] = os.getloadavg()
    report["failed_checks"] = problems
    return report


WORKERS = {"ours": run_ours, "trl": run_trl, "check": run_check}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", choices=("simpo", "orpo", "both"), default="both")
    side_by_side.add_pair_options(parser, pairs=32, batch=8, max_length=256)
    parser.add_argument("--first-batch", help=argparse.SUPPRESS)
    args = side_by_side.parse_options(
        parser,
        precision="auto",
        precisions=("auto", "fp32", "bf16", "both"),
        rounds=2,
        workers=WORKERS,
    )

    report = side_by_side.run_script(args, name="simpo-orpo", workers=WORKERS, bench=bench)
    if report and report["failed_checks"]:
        print(
            "NOT THE SAME COMPUTATION (or a side failed):\n  "
            + "\n  ".join(report["failed_checks"]),
            file=sys.stderr,
        )
        raise SystemExit(1)


if __name__ == "__main__":
    main()
