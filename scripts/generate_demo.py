"""Generate the demo project's comparisons: two SmolLM2 responses per prompt, plus demo judgements.

    python scripts/generate_demo.py [--model var/models/smollm2-135m-instruct] [--out demo/comparisons.jsonl]

Reads demo/prompts.jsonl (written by the team). For each prompt the packaged SmolLM2-135M-Instruct answers
twice with different sampling (a careful setting and an adventurous one); which setting becomes response
A is drawn per prompt so position carries no signal. The output is committed, so the demo starts in
seconds; run this again only when the prompts change.

The judgements on the first ``--judged`` comparisons are SIMULATED, and marked so in each row's metadata:
four demo annotators with different, known habits judge against a transparent reference rule (a
response that stops by itself and repeats itself less is better). They exist so the analytics pages have
real patterns to find (one annotator favours the left side, one the longer response). The remaining
comparisons are left for people to label in the demo.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from annotation.simulation import (  # noqa: E402
    DEMO_ANNOTATORS,
    GUESSES,
    GUESSING_HABITS,
    habit_choice,
)
from common.text import storable_text  # noqa: E402
from monitoring.stats.stopping import text_repetition_rate  # noqa: E402
from training.inference.generation import ChatGenerator, Generation, SamplingConfig  # noqa: E402

# A budget most answers finish within; the rest are cut back to their last whole sentence.
CAREFUL = SamplingConfig(max_new_tokens=384, temperature=0.3, top_p=0.9, seed=11)
ADVENTUROUS = SamplingConfig(max_new_tokens=384, temperature=1.0, top_p=0.95, seed=23)
MODEL = "smollm2-135m-instruct"

# The four demo annotators' habits, shares and times live in annotation.simulation (DEMO_ANNOTATORS),
# shared with the gold-reward farm's simulated annotators; here a reference rule replaces gold.


def repetition_rate(text: str) -> float:
    """Share of word 3-grams that repeat an earlier one of the same text (0 = no repetition)."""
    return text_repetition_rate(text.lower())


# A sentence ends with . ! ? (optionally a closing quote or bracket) before a space or the end, or a
# code block closes.
SENTENCE_END = re.compile(r"""[.!?]["')\]]*(?=\s|$)|```(?=\s*$|\n)""")


def end_on_sentence(text: str, *, finished: bool) -> tuple[str, bool]:
    """The response as shown in the demo, and whether it was cut: an answer that ran out of budget
    (not ``finished`` with EOS) ends at its last whole sentence; one with no sentence end at all is
    kept whole."""
    if finished:
        return text, False
    ends = [m.end() for m in SENTENCE_END.finditer(text)]
    if not ends:
        return text, False
    return text[: ends[-1]].rstrip(), ends[-1] < len(text.rstrip())


def trim_committed(path: Path) -> None:
    """Cut the committed comparisons' answers that stop mid-sentence (they ran out of budget when
    generated) back to their last whole sentence, keeping everything else, judgements included:
    regenerating takes an hour of CPU, trimming a second."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    n_cut = 0
    for row in rows:
        cut = set(row["metadata"].get("cut_at_sentence", []))
        for side in ("a", "b"):
            text = row[f"response_{side}"]
            ends_whole = any(m.end() == len(text.rstrip()) for m in SENTENCE_END.finditer(text))
            row[f"response_{side}"], was_cut = end_on_sentence(text, finished=ends_whole)
            if was_cut:
                cut.add(side)
                n_cut += 1
        if cut:
            row["metadata"]["cut_at_sentence"] = sorted(cut)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    print(f"cut {n_cut} answers of {2 * len(rows)} back to their last whole sentence in {path}")


def quality(gen: Generation, *, careful: bool) -> float:
    """The reference rule's score: stopping by itself is good, repetition and emptiness are bad, and
    a tiny model's low-temperature answer is usually the more coherent one."""
    if not gen.text:
        return -2.0
    finished = 1.0 if gen.finished else 0.0
    return finished - 2.0 * repetition_rate(gen.text) + (0.3 if careful else 0.0)


def reference_choice(a: Generation, b: Generation, careful: str) -> tuple[str, int]:
    """The rule's verdict ('a', 'b' or 'tie') and its strength (1-3); ``careful`` names the side
    sampled at low temperature."""
    diff = quality(a, careful=careful == "a") - quality(b, careful=careful == "b")
    if abs(diff) < 0.1:
        return "tie", 1
    strength = 1 if abs(diff) < 0.4 else 2 if abs(diff) < 1.0 else 3
    return ("a" if diff > 0 else "b"), strength


def simulated_judgement(
    name: str, a: Generation, b: Generation, careful: str, rng: random.Random
) -> dict[str, object]:
    """One demo annotator's judgement of (a, b), following the annotator's habit
    (annotation.simulation's model, with the reference rule's verdict in place of gold's). The draws
    from ``rng`` keep their order, so a seed gives the same judgements as before the habits moved."""
    profile = DEMO_ANNOTATORS[name]
    shown_left = rng.choice("ab")
    choice, strength = reference_choice(a, b, careful)
    if rng.random() < profile.habit_share:
        guess = rng.choice(GUESSES) if profile.habit in GUESSING_HABITS else "tie"
        choice = str(habit_choice(profile.habit, shown_left, len(a.text), len(b.text), guess))
        strength = rng.randint(1, 3)
    if choice == "tie":
        strength = 1
    return {
        "annotator": name,
        "choice": choice,
        "strength": strength,
        "shown_left": shown_left,
        "elapsed_ms": int(rng.lognormvariate(0, profile.time_spread) * profile.seconds * 1000),
    }


def conversation(prompt: str | list[dict[str, str]]) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt


def write_comparisons(
    rows: list[dict],
    careful: list[Generation],
    adventurous: list[Generation],
    *,
    out: Path,
    judged: int,
) -> None:
    """Write one comparison per prompt row to ``out`` (JSONL, the import format): its careful and
    adventurous answers in a seeded random order, cut back to their last whole sentence when they
    ran out of budget, with simulated judgements on the first ``judged``. A NUL character the model
    sampled is written as U+FFFD (``common.text.storable_text``): the import refuses NUL, which
    PostgreSQL text cannot store."""
    rng = random.Random(2026)
    names = list(DEMO_ANNOTATORS)
    with out.open("w") as stream:
        for index, row in enumerate(rows):
            pair = [(careful[index], "t0.3"), (adventurous[index], "t1.0")]
            rng.shuffle(pair)
            (gen_a, tag_a), (gen_b, tag_b) = pair
            text_a, cut_a = end_on_sentence(storable_text(gen_a.text), finished=gen_a.finished)
            text_b, cut_b = end_on_sentence(storable_text(gen_b.text), finished=gen_b.finished)
            metadata: dict[str, object] = {"category": row["category"]}
            cut = [side for side, was_cut in (("a", cut_a), ("b", cut_b)) if was_cut]
            if cut:  # ran out of budget: shown up to the last whole sentence
                metadata["cut_at_sentence"] = cut
            record: dict[str, object] = {
                "id": row["id"],
                "prompt": row["prompt"],
                "response_a": text_a,
                "response_b": text_b,
                "model_a": f"{MODEL}@{tag_a}",
                "model_b": f"{MODEL}@{tag_b}",
                "metadata": metadata,
            }
            if index < judged:
                judges = [names[(index + k) % len(names)] for k in range(3)]
                careful_side = "a" if tag_a == "t0.3" else "b"
                record["judgements"] = [
                    simulated_judgement(n, gen_a, gen_b, careful_side, rng) for n in judges
                ]
                metadata["simulated_judgements"] = True
            stream.write(json.dumps(record, ensure_ascii=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "var/models" / MODEL)
    parser.add_argument("--prompts", type=Path, default=ROOT / "demo/prompts.jsonl")
    parser.add_argument("--out", type=Path, default=ROOT / "demo/comparisons.jsonl")
    parser.add_argument("--judged", type=int, default=48, help="comparisons with demo judgements")
    parser.add_argument(
        "--trim-only",
        action="store_true",
        help="only cut --out's answers that stop mid-sentence back to their last whole sentence",
    )
    args = parser.parse_args()
    if args.trim_only:
        trim_committed(args.out)
        return

    rows = [json.loads(line) for line in args.prompts.read_text().splitlines() if line.strip()]
    conversations = [conversation(row["prompt"]) for row in rows]
    generator = ChatGenerator(args.model, device="cpu")
    careful = generator.generate(conversations, CAREFUL)
    adventurous = generator.generate(conversations, ADVENTUROUS)

    write_comparisons(rows, careful, adventurous, out=args.out, judged=args.judged)
    print(f"wrote {len(rows)} comparisons to {args.out}")


if __name__ == "__main__":
    main()
