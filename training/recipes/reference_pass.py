"""The one reference pass of the recipes that train against a frozen reference (DPO and KTO; SimPO
and ORPO need none): where its table is cached, which model computes it, and who computes it.

The reference never changes, so its log-probabilities are computed once per table and cached on
disk under a key of the data file, the reference weights, the tokenisation and the precision
(``reference_cache_path``). The model (``reference_for``) is the starting policy itself when the
run starts from it (no second copy), the policy with its LoRA adapters switched off when it has
them, else ``ref_model`` (or the base model when resuming) loaded beside it. Under torchrun, rank 0
computes what the cache lacks and writes it; the other ranks wait and read it
(``reference_pass``). What a table holds and how one forward fills it stays with its recipe
(``dpo.ReferenceLogps``, ``kto_data.KTOReference``): both save and load the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from training.recipes.config import TrainingConfig
from training.recipes.data import ChatEncoder
from training.recipes.distributed import barrier
from training.recipes.loop import Run
from training.recipes.lora import is_lora_model
from training.recipes.models import reference_model

REFERENCE_PHASE = "reference log-probs"  # the progress phase both recipes report


class ReferenceTable(Protocol):
    """A recipe's reference values, written atomically to one file."""

    def save(self, path: Path) -> None: ...


T = TypeVar("T", bound=ReferenceTable)


def reference_cache_path(
    config: TrainingConfig,
    output_dir: Path,
    *,
    table: str,
    key_prefix: str,
    data_sha256: str,
    reference_sha256: str,
    encoder: ChatEncoder,
) -> Path:
    """``<reference_cache_dir or output_dir/reference-cache>/<table>-reference-<key>.pt``: the key
    is 32 hex digits of SHA-256 over ``key_prefix``, the data file's and the reference weights'
    hashes, the tokenisation's fingerprint and the precision. ``key_prefix`` keeps the tables
    apart ("" for DPO's, whose key had none when caches were first written; "kto|" for KTO's), so
    a cache written before keeps being found."""
    material = (
        f"{key_prefix}{data_sha256}|{reference_sha256}|{encoder.fingerprint()}|bf16={config.bf16}"
    )
    key = hashlib.sha256(material.encode()).hexdigest()[:32]
    cache_dir = Path(config.reference_cache_dir or output_dir / "reference-cache")
    return cache_dir / f"{table}-reference-{key}.pt"


def reference_for(run: Run, config: TrainingConfig, policy: Any) -> Any:
    """The model whose log-probabilities are the reference: ``policy`` itself when the run starts
    from it (no ``ref_model``, not resuming, no LoRA adapters); with adapters and no ``ref_model``
    the policy's base weights (``reference_model(None, policy)``, no second copy, also when
    resuming); else ``ref_model``, or the starting model when resuming, loaded on the run's device."""
    same_model = config.ref_model is None and run.resume_from is None
    if same_model and not is_lora_model(policy):
        return policy
    return reference_model(
        config.ref_model or (None if is_lora_model(policy) else config.model),
        policy,
        device=run.device,
        packing=config.packing,
    )


def reference_pass(
    run: Run,
    config: TrainingConfig,
    *,
    policy: Any,
    table: T,
    has_work: bool,
    compute: Callable[[Any], None],
    cache_path: Path,
    load: Callable[[Path], T | None],
) -> T:
    """Fill ``table`` where the run needs it: when ``has_work``, rank 0 runs ``compute(model)``
    with ``reference_for``'s model (released after) and writes the table to ``cache_path``; every
    rank waits for it, and the other ranks then read it with ``load`` (a missing file is an error
    naming the rank). Returns the table every rank holds."""
    if has_work and run.ranks.main:
        model = reference_for(run, config, policy)
        compute(model)
        del model
        table.save(cache_path)
    barrier(run.ranks)  # the other ranks read what rank 0 computed
    if has_work and not run.ranks.main:
        loaded = load(cache_path)
        if loaded is None:
            raise RuntimeError(f"rank {run.ranks.rank}: rank 0 wrote no reference at {cache_path}")
        return loaded
    return table
