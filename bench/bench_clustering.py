"""Prompt clustering: our embedding path against sentence-transformers' own ``encode``, and the time
to re-cluster 10,000 prompts whose embeddings are cached against the time to encode them again.

Prints one JSON object:

- ``embed``: prompts per second of ``prompt_embeddings_ensure`` (read prompts, hash texts, sort by
  length, encode in chunks, write float32 rows) and of ``SentenceTransformer.encode`` on the same
  texts (same model object, same batch size, warmed up; best of ``--repeats``, taken in turns);
  ``ratio`` = ours / peer in prompts per second (1.0 = no overhead).
- ``recluster``: a full clustering run (``clustering_run_execute``: nothing to embed, k chosen by
  silhouette over 2..12, c-TF-IDF, central prompts, PCA, Prompt.cluster written) on ``--prompts``
  cached prompts, and ``encode`` of the same texts; ``ratio`` = encode / re-cluster (how much the
  cache saves). ``fixed_k_seconds``: the same run with ``--k`` given (no silhouette search).

Uses the configured database (``DATABASE_URL``; run ``manage.py migrate`` first) in a throwaway
project that is deleted at the end. CPU only, like the service.

    .venv/bin/python bench/bench_clustering.py [--embed-prompts 1000] [--prompts 10000] [--k 10]
        [--repeats 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

OPENERS = [
    "",
    "Quick question: ",
    "Please help. ",
    "I was wondering: ",
    "Hi! ",
    "Sorry if this is basic, but ",
    "My teacher asked me this. ",
    "For a project at work: ",
    "Honest answer please. ",
    "Can you tell me: ",
]
CLOSERS = [
    "",
    " Thanks!",
    " Keep it short.",
    " Explain like I'm five.",
    " Give an example.",
    " Answer in one paragraph.",
    " Be precise.",
    " Use bullet points.",
    " I'm in a hurry.",
    " Cite your reasoning.",
    " Be friendly.",
    " Assume I know the basics.",
    " No jargon, please.",
    " Give two options.",
]


def demo_texts() -> list[str]:
    texts = []
    for line in (ROOT / "demo" / "prompts.jsonl").read_text().splitlines():
        prompt = json.loads(line)["prompt"]
        texts.append(prompt if isinstance(prompt, str) else prompt[-1]["content"])
    return texts


def prompt_texts(n: int) -> list[str]:
    """``n`` distinct, realistic prompts: demo prompts with openers and closers (72 x 10 x 14)."""
    variants = (
        f"{opener}{text}{closer}"
        for opener, closer in itertools.product(OPENERS, CLOSERS)
        for text in demo_texts()
    )
    texts = list(itertools.islice(variants, n))
    if len(texts) < n:
        raise SystemExit(f"at most {len(texts)} distinct prompts can be generated")
    return texts


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embed-prompts", type=int, default=1000)
    parser.add_argument("--prompts", type=int, default=10_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="Embedding timings: best of.")
    args = parser.parse_args()

    import django

    django.setup()
    import numpy as np
    import torch
    from django.conf import settings

    from annotation.models import Project, Prompt, PromptEmbedding
    from annotation.parsing import content_hash
    from annotation.services import clustering as service

    model_name = settings.CONCORD_DEFAULT_EMBEDDING_MODEL
    model = service.sentence_transformer(model_name)
    encoder = service.sentence_encoder(model_name)

    def peer_encode(texts: list[str]) -> np.ndarray:
        return model.encode(
            texts,
            batch_size=service.ENCODE_BATCH,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )

    def make_project(texts: list[str]) -> Project:
        project = Project.objects.create(
            name="bench clustering", slug=f"bench-clustering-{uuid.uuid4().hex[:8]}"
        )
        Prompt.objects.bulk_create(
            [Prompt(project=project, text=t, content_hash=content_hash(t)) for t in texts],
            batch_size=2000,
        )
        return project

    peer_encode(demo_texts())  # warm-up: first calls allocate and JIT-select kernels
    projects: list[Project] = []
    try:
        # Embedding speed: ours (whole service path) against encode on the same texts, taken in
        # turns and best of --repeats each, so a noisy neighbour on the CPU hurts both alike.
        texts = prompt_texts(args.embed_prompts)
        project = make_project(texts)
        projects.append(project)
        peer_s = ours_s = float("inf")
        for _ in range(args.repeats):
            peer_s = min(peer_s, timed(lambda: peer_encode(texts))[0])
            PromptEmbedding.objects.filter(prompt__project=project).delete()
            seconds, embedded = timed(
                lambda: service.prompt_embeddings_ensure(
                    project=project, model_name=model_name, encoder=encoder
                )
            )
            assert embedded == len(texts)
            ours_s = min(ours_s, seconds)

        # Re-clustering cached prompts: the cache is filled from encode's own vectors.
        texts = prompt_texts(args.prompts)
        encode_s, vectors = timed(lambda: peer_encode(texts))
        project = make_project(texts)
        projects.append(project)
        prompts = Prompt.objects.filter(project=project).only("id", "text", "messages")
        row_of = {text: row for row, text in enumerate(texts)}
        PromptEmbedding.objects.bulk_create(
            [
                PromptEmbedding(
                    prompt=prompt,
                    model_name=model_name,
                    text_hash=service.text_hash(service.embedding_text(prompt)),
                    dim=vectors.shape[1],
                    vector=np.asarray(vectors[row_of[prompt.text]], dtype="<f4").tobytes(),
                )
                for prompt in prompts
            ],
            batch_size=2000,
        )

        def recluster(k: int | None):
            run, _ = service.clustering_run_request(project=project, k=k)
            return service.clustering_run_execute(run_id=run.pk)

        recluster_s, run = timed(lambda: recluster(None))
        assert run.n_embedded == 0, "the cache was not used"
        fixed_s, fixed_run = timed(lambda: recluster(args.k))
        assert fixed_run.n_embedded == 0
    finally:
        for project in projects:
            project.delete()

    print(
        json.dumps(
            {
                "benchmark": "prompt clustering (all-MiniLM-L6-v2 on CPU)",
                "torch_threads": torch.get_num_threads(),
                "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
                "embed": {
                    "prompts": args.embed_prompts,
                    "repeats": args.repeats,
                    "ours_prompts_per_s": round(args.embed_prompts / ours_s, 1),
                    "sentence_transformers_prompts_per_s": round(args.embed_prompts / peer_s, 1),
                    "ratio": round(peer_s / ours_s, 3),
                },
                "recluster": {
                    "prompts": args.prompts,
                    "seconds": round(recluster_s, 2),
                    "k_chosen": run.k,
                    "silhouette": round(run.silhouette or 0.0, 4),
                    "fixed_k": args.k,
                    "fixed_k_seconds": round(fixed_s, 2),
                    "sentence_transformers_encode_seconds": round(encode_s, 2),
                    "ratio": round(encode_s / recluster_s, 2),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
