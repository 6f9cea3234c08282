"""An export as a Hugging Face dataset: Parquet train/test splits by prompt and a dataset card.

Reads an export's frozen pairs.jsonl (annotation.services.exporting) and writes TRL's preference
format, standard (texts) or conversational (message lists), with the pairs' other fields as columns
(HF_EXTRA_COLUMNS, ``answer`` among them: null where the prompt has none).
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring
from pathlib import Path

from annotation.models import DatasetExport, Project
from annotation.services.exporting import PAIRS_FILE

HF_FORMAT = "hf"
Progress = Callable[[int, int], None]  # (pairs written, pairs in the export)
HF_SPLITS = ("train", "test")
HF_BATCH_ROWS = 1000
HF_EXTRA_COLUMNS = (
    "margin", "agreement", "n_judgements", "tie", "chosen_side", "consensus", "comparison_id",
    "cluster", "external_id", "model_chosen", "model_rejected", "answer",
)  # fmt: skip
SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                   (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"))  # fmt: skip


@dataclass(frozen=True)
class HfExport:
    """Where an HF-format export was written and how many rows each split holds."""

    folder: Path
    rows: dict[str, int]
    conversational: bool


# ``json.dumps(prompt, sort_keys=True, ensure_ascii=False)`` without building an encoder per call.
_KEY_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


def _prompt_key(prompt: object) -> str:
    """SHA-256 (hex) of ``json.dumps(prompt, sort_keys=True, ensure_ascii=False)``."""
    text = encode_basestring(prompt) if isinstance(prompt, str) else _KEY_ENCODER.encode(prompt)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def prompts_for_test_split(prompts: dict[str, object], *, test_fraction: float) -> set[str]:
    """The prompt keys that go to the test split: in each cluster, the round(fraction x n)
    prompts with the smallest keys (a SHA-256, so the choice is deterministic but unrelated to
    content), and at least one when the cluster has two or more prompts and the fraction is > 0.

    ``prompts``: {prompt key: cluster (None: unclustered, one stratum)}. A prompt is in one split
    only, so every comparison on it follows it (no prompt in both).
    """
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    strata: dict[object, list[str]] = {}
    for key, cluster in prompts.items():
        strata.setdefault(cluster, []).append(key)
    chosen: set[str] = set()
    for keys in strata.values():
        keys.sort()
        n_test = round(test_fraction * len(keys))
        if test_fraction > 0 and len(keys) >= 2:
            n_test = max(1, n_test)
        chosen.update(keys[: min(n_test, len(keys) - 1)])
    return chosen


def _hf_schema(conversational: bool):
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    text = pa.list_(message) if conversational else pa.string()
    return pa.schema(
        [
            ("prompt", text), ("chosen", text), ("rejected", text),
            ("margin", pa.float64()), ("agreement", pa.float64()),
            ("n_judgements", pa.int64()), ("tie", pa.bool_()), ("chosen_side", pa.string()),
            ("consensus", pa.string()), ("comparison_id", pa.int64()), ("cluster", pa.int64()),
            ("external_id", pa.string()), ("model_chosen", pa.string()),
            ("model_rejected", pa.string()), ("answer", pa.string()),
        ]
    )  # fmt: skip


def _hf_row(pair: dict, conversational: bool) -> dict:
    """One pairs.jsonl row as a TRL DPO row: standard (texts) or conversational (message lists)."""
    row = {name: pair.get(name) for name in HF_EXTRA_COLUMNS}
    if conversational:
        prompt = pair["prompt"]
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        row["prompt"] = [{"role": t["role"], "content": t["content"]} for t in prompt]
        row["chosen"] = [{"role": "assistant", "content": pair["chosen"]}]
        row["rejected"] = [{"role": "assistant", "content": pair["rejected"]}]
    else:
        row.update(prompt=pair["prompt"], chosen=pair["chosen"], rejected=pair["rejected"])
    return row


def _size_category(n: int) -> str:
    return next((label for limit, label in SIZE_CATEGORIES if n < limit), "n>10M")


def _figure(value: float) -> str:
    return f"{value:.3f}" if value is not None and math.isfinite(value) else "undefined"


def _agreement_figures(project: Project) -> dict | None:
    """The agreement summary the card prints (``agreement_summary`` with intervals): the dashboard's
    stored report when it still matches the judgements (``judgements_fingerprint``), which spares a
    second read of every judgement; else computed now (500 bootstrap draws; not stored, as the
    dashboard's own refresh adds the pairs' intervals). None when no person has judged."""
    from annotation.selectors.agreement import cached_dashboard, judgements_fingerprint
    from annotation.services.agreement import agreement_summary, project_agreement

    fingerprint = judgements_fingerprint(project=project)
    if not fingerprint[0]:
        return None
    payload = cached_dashboard(project=project)
    if payload is not None and payload.get("fingerprint") == fingerprint:
        return payload["summary"]
    return agreement_summary(project_agreement(project=project, n_boot=500), intervals=True)


def _agreement_lines(summary: dict | None) -> list[str]:
    """Card lines of an agreement summary: each coefficient with its 95% bootstrap interval, then
    Cohen's kappa per pair of annotators."""
    from annotation import agreement

    if summary is None:
        return ["- No judgements: no agreement figures."]
    lines = []
    for name in agreement.COEFFICIENTS:
        low, high = summary["intervals"][name]
        interval = ""
        if low is not None and high is not None:
            interval = f" (95% bootstrap interval {low:.3f} to {high:.3f})"
        lines.append(f"- {name.replace('_', ' ')}: {_figure(summary[name])}{interval}")
    for pair in summary["cohen_kappa"]:
        lines.append(
            f"- Cohen's kappa, {pair['a']} and {pair['b']}: {_figure(pair['kappa'])} "
            f"over {pair['n']} comparisons"
        )
    return lines


def _dataset_card(
    *, export: DatasetExport, rows: dict[str, int], conversational: bool, license: str,
    test_fraction: float,
) -> str:  # fmt: skip
    project = export.project
    figures = _agreement_figures(project)
    n_annotators = figures["n_annotators"] if figures else 0
    guidelines = (
        f"`{hashlib.sha256(project.guidelines.encode('utf-8')).hexdigest()[:12]}` (first 12 hex "
        "digits of the SHA-256 of the guidelines text annotators saw)"
        if project.guidelines.strip()
        else "none (the project has no guidelines text)"
    )
    options = export.options
    rule = options.get("consensus", "majority")
    total = sum(rows.values())
    yaml = "\n".join(
        [
            "---",
            f"license: {license}",
            f"pretty_name: {json.dumps(project.name)}",
            "size_categories:",
            f"- {_size_category(total)}",
            "tags:",
            "- preference",
            "- dpo",
            "- rlhf",
            "- concord",
            "configs:",
            "- config_name: default",
            "  data_files:",
            *(f"  - split: {s}\n    path: data/{s}-*.parquet" for s in HF_SPLITS if rows[s]),
            "---",
        ]
    )
    layout = (
        "conversational (`prompt` a list of {role, content} turns; `chosen` and `rejected` the "
        "assistant's reply as a one-turn list)"
        if conversational
        else "standard (`prompt`, `chosen` and `rejected` are texts)"
    )
    body = [
        f"# {project.name}",
        "",
        f"Pairwise human preferences exported from Concord project `{project.slug}`, in TRL's "
        f"preference format, {layout}: `DPOTrainer` and `RewardTrainer` read the rows as they are.",
        "",
        "## Contents",
        f"- Rows: {rows['train']} in `train`, {rows['test']} in `test` ({total} in all); the "
        f"split is by prompt (no prompt in both), stratified by prompt cluster, {test_fraction:.0%} "
        "of each cluster's prompts to `test`, chosen by the SHA-256 of the prompt.",
        f"- Judgements: {export.n_judgements} by {n_annotators} annotators; overlap "
        f"{project.overlap} annotators per comparison (the project's target).",
        f"- Consensus rule: {rule} (see `consensus`, `agreement` and `margin` per row); ties "
        f"{'kept (margin 0, `tie` true)' if options.get('keep_ties') else 'dropped'} "
        f"({export.n_ties_dropped} dropped); at least {options.get('min_judgements', 1)} "
        "judgement(s) per pair.",
        f"- Guidelines version: {guidelines}.",
        f"- Export hash: `{export.sha256}` (SHA-256 of the export's pairs.jsonl and "
        "judgements.jsonl; a training run names it).",
        f"- Licence: {license}.",
        "",
        "## Agreement",
        "Over the project's judgements when this card was written:",
        *_agreement_lines(figures),
        "",
        "## Columns",
        "`prompt`, `chosen`, `rejected`; `margin` (signed strength of the consensus, -1 to 1), "
        "`agreement` (share of judgements matching the consensus, or its posterior), "
        "`n_judgements`, `tie`, `chosen_side` (which of the comparison's responses won), "
        "`consensus`, `comparison_id`, `cluster` (prompt cluster, null before clustering), "
        "`external_id`, `model_chosen`, `model_rejected`, `answer` (the prompt's reference "
        "answer for answer-checking rewards such as GRPO's `exact_answer`, null when it has none).",
        "",
    ]
    return yaml + "\n" + "\n".join(body)


def hf_export_write(
    *, export: DatasetExport, out: Path, test_fraction: float = 0.1, license: str = "other",
    progress: Progress | None = None,
) -> HfExport:  # fmt: skip
    """Write ``export`` as a Hugging Face dataset folder: ``data/train-00000-of-00001.parquet``,
    ``data/test-00000-of-00001.parquet`` and a dataset card ``README.md`` (YAML metadata: licence,
    size, configs and splits; then a plain summary). ``datasets.load_dataset(str(out))`` loads it.

    Reads the export's frozen pairs.jsonl twice (prompts and clusters, then rows), writing Parquet
    in batches of HF_BATCH_ROWS: memory holds one key per prompt, then one number per pair (its
    prompt's, so the second reading hashes nothing), never the rows.
    ``progress(written, total)``: called every HF_BATCH_ROWS pairs written and at the end (pairs;
    the total is the export's ``n_pairs``).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not license or any(c.isspace() for c in license):
        raise ValueError(
            f"license must be one SPDX-style identifier (e.g. cc-by-4.0), got {license!r}"
        )
    pairs_path = Path(export.folder) / PAIRS_FILE
    # Each prompt's key once, numbered in order of appearance; each pair's prompt number, so the
    # second reading does not hash the prompts again.
    numbers: dict[str, int] = {}
    clusters: list[object] = []
    pair_prompt = array("I")
    conversational = False
    with pairs_path.open(encoding="utf-8") as handle:
        for line in handle:
            pair = json.loads(line)
            number = numbers.setdefault(_prompt_key(pair["prompt"]), len(numbers))
            if number == len(clusters):
                clusters.append(None)
            clusters[number] = pair.get("cluster")
            pair_prompt.append(number)
            conversational = conversational or not isinstance(pair["prompt"], str)
    test_keys = prompts_for_test_split(
        {key: clusters[number] for key, number in numbers.items()}, test_fraction=test_fraction
    )
    in_test = bytearray(len(clusters))
    for key in test_keys:
        in_test[numbers[key]] = 1
    del numbers, clusters, test_keys
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    for stale in data.glob("*.parquet"):
        stale.unlink()
    schema = _hf_schema(conversational)
    rows = dict.fromkeys(HF_SPLITS, 0)
    writers = {s: pq.ParquetWriter(data / f"{s}-00000-of-00001.parquet", schema) for s in HF_SPLITS}
    batches: dict[str, list[dict]] = {s: [] for s in HF_SPLITS}

    def flush(split: str) -> None:
        if batches[split]:
            writers[split].write_table(pa.Table.from_pylist(batches[split], schema=schema))
            batches[split] = []

    try:
        with pairs_path.open(encoding="utf-8") as handle:
            for line, number in zip(handle, pair_prompt, strict=True):
                pair = json.loads(line)
                split = "test" if in_test[number] else "train"
                batches[split].append(_hf_row(pair, conversational))
                rows[split] += 1
                if len(batches[split]) >= HF_BATCH_ROWS:
                    flush(split)
                written = rows["train"] + rows["test"]
                if progress is not None and written % HF_BATCH_ROWS == 0:
                    progress(written, export.n_pairs)
        for split in HF_SPLITS:
            flush(split)
        if progress is not None:
            progress(rows["train"] + rows["test"], export.n_pairs)
    finally:
        for writer in writers.values():
            writer.close()
    for split in HF_SPLITS:
        if not rows[split]:  # an empty split is left out of the card's configs and the folder
            (data / f"{split}-00000-of-00001.parquet").unlink()
    # The card's agreement report reads every judgement: free the prompt keys and what Arrow's pool
    # kept from the Parquet batches first (the export's peak memory is the report's).
    del pair_prompt, in_test
    pa.default_memory_pool().release_unused()
    card = _dataset_card(
        export=export, rows=rows, conversational=conversational, license=license,
        test_fraction=test_fraction,
    )  # fmt: skip
    (out / "README.md").write_text(card, encoding="utf-8")
    return HfExport(folder=out, rows=rows, conversational=conversational)


HF_ARCHIVE = "hf.zip"


def hf_export_archive_path(export: DatasetExport) -> Path:
    """Where the export's Hugging Face dataset zip lies once built (``hf_export_archive``)."""
    return Path(export.folder) / HF_ARCHIVE


def hf_export_archive(
    *, export: DatasetExport, license: str = "other", progress: Progress | None = None
) -> Path:
    """The export as a zipped Hugging Face dataset folder (built once, kept beside the export's
    files): unzip it and ``datasets.load_dataset(folder)``. Written under a temporary name and
    renamed, so a reader never sees half an archive. ``progress``: as ``hf_export_write``'s (not
    called when the zip is already there). Built on the worker (an export job): a large
    project's zip takes longer than a web request may."""
    import zipfile

    folder = Path(export.folder)
    archive = hf_export_archive_path(export)
    if archive.exists():
        return archive
    with tempfile.TemporaryDirectory(dir=folder, prefix=".hf-") as scratch:
        built = hf_export_write(
            export=export, out=Path(scratch) / "dataset", license=license, progress=progress
        )
        partial = Path(scratch) / HF_ARCHIVE
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
            for path in sorted(built.folder.rglob("*")):
                if path.is_file():
                    out.write(path, path.relative_to(built.folder))
        partial.replace(archive)
    return archive
