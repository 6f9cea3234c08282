"""The native formats and containers of the import, on small files the tests write.

Each format: a good file imports with the expected comparisons and judgements, and each kind of bad
row is refused with its number and field. Containers: JSON arrays, Parquet, gzip and zstd JSONL,
with the decompressed-size guard; ``--skip-invalid`` imports the good rows and lists the others.
"""

import gzip
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from annotation import formats
from annotation.formats.base import ReadOptions, RowError
from annotation.models import Comparison, Judgement, Prompt, Response
from annotation.parsing import ImportValidationError
from annotation.services.importing import ImportOptions, comparisons_import, project_get_or_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def project():
    return project_get_or_create(slug="formats")[0]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _import(path: Path, project, **options) -> object:
    read = {k: options.pop(k) for k in list(options) if k in ReadOptions.__dataclass_fields__}
    return comparisons_import(
        project=project,
        lines=path,
        options=ImportOptions(read=ReadOptions(**read), **options),
    )


def _errors(path: Path, project, **options) -> list[str]:
    with pytest.raises(ImportValidationError) as caught:
        _import(path, project, **options)
    assert not Comparison.objects.exists()
    return [str(e) for e in caught.value.errors]


# --- The two rules: a row's id is its comparison; empty responses are answers -------------------
def test_rows_with_their_own_ids_stay_two_comparisons_even_with_equal_content(project):
    """Two models gave the same answers: two ids, two comparisons, each with its own annotators."""
    row = {"prompt": "Q?", "response_a": "yes", "response_b": "no"}
    lines = [
        json.dumps({**row, "id": "1", "model_a": "m1", "model_b": "m2",
                    "judgements": [{"annotator": "ann", "choice": "a"}]}),
        json.dumps({**row, "id": "2", "model_a": "m3", "model_b": "m4",
                    "judgements": [{"annotator": "ann", "choice": "b"}]}),
    ]  # fmt: skip
    result = comparisons_import(project=project, lines=lines)
    assert (result.comparisons_created, result.judgements_created) == (2, 2)
    models = sorted(
        (c.external_id, c.response_a.model_name, c.response_b.model_name)
        for c in Comparison.objects.select_related("response_a", "response_b")
    )
    assert models == [("1", "m1", "m2"), ("2", "m3", "m4")]
    again = comparisons_import(project=project, lines=lines[::-1])
    assert (again.comparisons_created, again.comparisons_existing) == (0, 2)
    assert again.judgements_existing == 2


def test_rows_without_ids_differ_by_their_model_names(project):
    row = {"prompt": "Q?", "response_a": "yes", "response_b": "no"}
    lines = [
        json.dumps({**row, "model_a": "m1", "model_b": "m2"}),
        json.dumps({**row, "model_a": "m3", "model_b": "m4"}),
        json.dumps({**row, "model_a": "m1", "model_b": "m2"}),
    ]
    result = comparisons_import(project=project, lines=lines)
    assert (result.rows, result.comparisons_created) == (3, 2)
    assert Comparison.objects.count() == 2


def test_one_id_with_two_contents_is_an_error(project):
    lines = [
        json.dumps({"id": "x", "prompt": "Q?", "response_a": "yes", "response_b": "no"}),
        json.dumps({"id": "x", "prompt": "Q?", "response_a": "yes", "response_b": "maybe"}),
    ]
    with pytest.raises(ImportValidationError, match="id 'x' is also on line 1 with a different"):
        comparisons_import(project=project, lines=lines)


@pytest.mark.parametrize("empty", ["", "   \n"])
def test_empty_and_whitespace_responses_are_imported_and_counted(project, empty):
    lines = [json.dumps({"prompt": "Q?", "response_a": "An answer.", "response_b": empty})]
    result = comparisons_import(project=project, lines=lines)
    assert (result.comparisons_created, result.empty_responses) == (1, 1)
    assert "1 empty response" in result.summary()
    assert Comparison.objects.get().response_b.text == empty


def test_two_equal_empty_responses_compare_nothing(project):
    lines = [json.dumps({"prompt": "Q?", "response_a": "", "response_b": ""})]
    with pytest.raises(ImportValidationError, match=r"response_b.*identical to response_a"):
        comparisons_import(project=project, lines=lines)


def test_two_models_giving_the_same_answer_are_still_compared(project):
    """Two different models may answer alike (MT-Bench has 13 such turn-1 pairs, with votes):
    the pair is kept; the same text without two different model names is still refused."""
    same = {"prompt": "Q?", "response_a": "42.", "response_b": "42."}
    lines = [json.dumps(same | {"model_a": "m1", "model_b": "m2"})]
    assert comparisons_import(project=project, lines=lines).comparisons_created == 1
    for models in ({}, {"model_a": "m1"}, {"model_a": "m1", "model_b": "m1"}):
        with pytest.raises(ImportValidationError, match=r"response_b.*identical to response_a"):
            comparisons_import(project=project, lines=[json.dumps(same | models)])


# --- Containers ------------------------------------------------------------------------------
CONCORD_ROWS = [
    {"id": f"r{i}", "prompt": f"Question {i}?", "response_a": f"A{i}", "response_b": f"B{i}"}
    for i in range(5)
]


def test_json_array_file_is_read_item_by_item(tmp_path, project, monkeypatch):
    """Items are decoded from a sliding buffer: a chunk smaller than an item still reads whole."""
    monkeypatch.setattr("annotation.formats.containers.CHUNK_BYTES", 7)
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(CONCORD_ROWS, indent=2), encoding="utf-8")
    result = _import(path, project)
    assert (result.format, result.container, result.comparisons_created) == ("concord", "json", 5)


def test_json_array_bad_item_names_the_item(tmp_path, project):
    rows = [*CONCORD_ROWS[:2], {"prompt": "Q", "response_a": "x"}]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    assert _errors(path, project) == ["item 3, field 'response_b': is required"]


def test_truncated_json_array_is_one_clear_error(tmp_path, project):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(CONCORD_ROWS)[:-40], encoding="utf-8")
    with pytest.raises(formats.SourceError, match="item 5: malformed JSON"):
        _import(path, project)
    assert not Comparison.objects.exists()


def test_parquet_file_is_read_by_row_group(tmp_path, project):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(CONCORD_ROWS), path, row_group_size=2)
    assert pq.ParquetFile(path).num_row_groups == 3
    result = _import(path, project)
    assert (result.container, result.comparisons_created) == ("parquet", 5)


def test_parquet_bad_row_names_the_row(tmp_path, project):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [*CONCORD_ROWS[:3], {**CONCORD_ROWS[3], "response_b": "A3"}]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert _errors(path, project) == ["row 4, field 'response_b': is identical to response_a"]


def test_gzip_jsonl_imports(tmp_path, project):
    path = tmp_path / "rows.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in CONCORD_ROWS).encode()))
    result = _import(path, project)
    assert (result.container, result.comparisons_created) == ("gzip", 5)


def test_zstd_jsonl_imports(tmp_path, project):
    import zstandard

    path = tmp_path / "rows.jsonl.zst"
    text = "".join(json.dumps(r) + "\n" for r in CONCORD_ROWS).encode()
    path.write_bytes(zstandard.ZstdCompressor().compress(text))
    result = _import(path, project)
    assert (result.container, result.comparisons_created) == ("zstd", 5)


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_compressed_file_over_the_limit_stops_and_writes_nothing(tmp_path, project, settings, kind):
    """A few kilobytes that unpack to 4 MB: the read stops once 1 MB has come out."""
    import zstandard

    settings.CONCORD_IMPORT_MAX_BYTES = 1024 * 1024
    row = json.dumps({"prompt": "Q" * 1000, "response_a": "a", "response_b": "b"}) + "\n"
    rows = "".join(row.replace('"Q', f'"{i}Q', 1) for i in range(4000)).encode()
    packed = gzip.compress(rows) if kind == "gzip" else zstandard.ZstdCompressor().compress(rows)
    assert len(packed) < 100_000 < settings.CONCORD_IMPORT_MAX_BYTES < len(rows)
    path = tmp_path / "bomb.jsonl"
    path.write_bytes(packed)
    with pytest.raises(formats.SourceError, match="decompresses to more than 1,048,576 bytes"):
        _import(path, project)
    assert not Comparison.objects.exists() and not Prompt.objects.exists()


def test_command_reports_the_bomb_guard_and_creates_no_project(tmp_path, settings):
    settings.CONCORD_IMPORT_MAX_BYTES = 1000
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(gzip.compress(b" " * 100_000))
    with pytest.raises(CommandError, match="decompresses to more than 1,000 bytes"):
        call_command("import_comparisons", str(path), "--project", "never")


def test_unknown_format_is_refused_naming_the_fields(tmp_path, project):
    path = _jsonl(tmp_path / "rows.jsonl", [{"question": "Q", "answer": "A"}])
    with pytest.raises(formats.SourceError, match=r"fields \(answer, question\); give --format"):
        _import(path, project)


# --- --skip-invalid ---------------------------------------------------------------------------
def test_skip_invalid_imports_good_rows_and_lists_the_rejected(tmp_path, project):
    rows = [CONCORD_ROWS[0], {"prompt": "Q", "response_a": "x"}, CONCORD_ROWS[1]]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n", encoding="utf-8")
    result = _import(path, project, skip_invalid=True)
    assert (result.rows, result.rows_rejected, result.comparisons_created) == (4, 2, 2)
    assert result.rejects_path == str(tmp_path / "rows.jsonl.rejected.jsonl")
    assert "2 rows imported, 2 rejected (listed in" in result.summary()
    rejected = [json.loads(line) for line in Path(result.rejects_path).read_text().splitlines()]
    assert [(r["line"], r["errors"][0]["field"]) for r in rejected] == [(2, "response_b"), (4, "")]
    assert rejected[0]["record"] == json.dumps(rows[1])
    assert rejected[1]["errors"][0]["message"].startswith("malformed JSON")


def test_skip_invalid_through_the_command(tmp_path, capsys):
    path = _jsonl(tmp_path / "rows.jsonl", [CONCORD_ROWS[0], {"prompt": "Q"}])
    call_command("import_comparisons", str(path), "--project", "skips", "--skip-invalid")
    out = capsys.readouterr().out
    assert "1 row imported, 1 rejected" in out and "rows.jsonl.rejected.jsonl" in out
    assert Comparison.objects.count() == 1


def test_without_skip_invalid_a_bad_row_imports_nothing_and_writes_no_rejects(tmp_path, project):
    path = _jsonl(tmp_path / "rows.jsonl", [CONCORD_ROWS[0], {"prompt": "Q"}])
    assert len(_errors(path, project)) == 2
    assert not (tmp_path / "rows.jsonl.rejected.jsonl").exists()


# --- TRL ----------------------------------------------------------------------------------------
def test_trl_standard_conversational_and_implicit_prompt_rows(tmp_path, project):
    user = {"role": "user", "content": "Hi?"}
    rows = [
        {"prompt": "Q?", "chosen": "good", "rejected": "bad"},
        {"prompt": [user], "chosen": [{"role": "assistant", "content": "Hello!"}],
         "rejected": [{"role": "assistant", "content": "Go away."}]},
        {"chosen": [user, {"role": "assistant", "content": "Hey."}],
         "rejected": [user, {"role": "assistant", "content": ""}]},
    ]  # fmt: skip
    path = _jsonl(tmp_path / "trl.jsonl", rows)
    result = _import(path, project, format="trl")
    assert (result.comparisons_created, result.empty_responses) == (3, 1)
    pairs = sorted(
        (c.response_a.text, c.response_b.text, c.metadata["trl_preferred"])
        for c in Comparison.objects.all()
    )
    assert pairs == [("Hello!", "Go away.", "a"), ("Hey.", "", "a"), ("good", "bad", "a")]
    assert Prompt.objects.filter(messages=[user]).count() == 1
    assert not Judgement.objects.exists()


def test_trl_label_as_records_the_preference(tmp_path, project):
    path = _jsonl(tmp_path / "trl.jsonl", [{"prompt": "Q?", "chosen": "good", "rejected": "bad"}])
    _import(path, project, format="trl", label_as="trl-source")
    judgement = Judgement.objects.get()
    assert (judgement.annotator.username, judgement.choice) == ("trl-source", "a")


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ({"prompt": "Q?", "chosen": "x"}, "line 1, field 'rejected': is required"),
        ({"chosen": "x", "rejected": "y"},
         "line 1, field 'prompt': is required when chosen and rejected are texts"),
        ({"prompt": "Q?", "chosen": [{"role": "user", "content": "x"}], "rejected": "y"},
         "line 1, field 'chosen': must end with an assistant turn"),
        ({"chosen": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "x"}],
          "rejected": [{"role": "user", "content": "b"}, {"role": "assistant", "content": "y"}]},
         "line 1, field 'rejected': differs from chosen at turn 0, before the last assistant turn"),
        ({"prompt": "Q?", "chosen": [{"role": "bot", "content": "x"}], "rejected": "y"},
         "line 1, field 'chosen[0]': must be {role: system|user|assistant, content: text}"),
    ],
)  # fmt: skip
def test_trl_bad_rows(tmp_path, project, row, error):
    assert _errors(_jsonl(tmp_path / "trl.jsonl", [row]), project, format="trl") == [error]


# --- HH-RLHF ------------------------------------------------------------------------------------
HH = {
    "chosen": "\n\nHuman: Hi\n\nAssistant: Hello.\n\nHuman: How are you?\n\nAssistant: Fine.",
    "rejected": "\n\nHuman: Hi\n\nAssistant: Hello.\n\nHuman: How are you?\n\nAssistant: Go away.",
}


def test_hh_transcripts_split_into_conversation_and_final_replies(tmp_path, project):
    babble = {
        "chosen": "\n\nHuman: Q\n\nAssistant: Sure.  Human: more?\n\nAssistant: yes",
        "rejected": "\n\nHuman: Q\n\nAssistant:",
    }
    path = tmp_path / "hh.jsonl.gz"
    path.write_bytes(gzip.compress(f"{json.dumps(HH)}\n{json.dumps(babble)}\n".encode()))
    result = _import(path, project)
    assert (result.format, result.comparisons_created, result.empty_responses) == ("hh-rlhf", 2, 1)
    first = Comparison.objects.get(response_a__text="Fine.")
    assert first.prompt.messages == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "How are you?"},
    ]
    assert (first.prompt.text, first.response_b.text) == ("How are you?", "Go away.")
    # A reply that imitates the dialogue stays one reply.
    second = Comparison.objects.get(prompt__text="Q")
    assert (second.response_a.text, second.response_b.text) == (
        "Sure.  Human: more?\n\nAssistant: yes",
        "",
    )
    assert {j.annotator.username for j in Judgement.objects.all()} == {"hh-rlhf"}
    assert set(Judgement.objects.values_list("choice", flat=True)) == {"a"}


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ({"chosen": HH["chosen"], "rejected": HH["chosen"].replace("How are", "Who are")},
         "line 1, field 'chosen': the transcripts differ before the last assistant turn (a Human "
         "turn follows where they split)"),
        ({"chosen": HH["chosen"], "rejected": "\n\nHuman: Bye"},
         "line 1, field 'rejected': has no assistant turn in common with chosen"),
        ({"chosen": HH["chosen"], "rejected": 3}, "line 1, field 'rejected': must be a string, not "
         "int 3 (--scalars-as-text imports it as its JSON text)"),
    ],
)  # fmt: skip
def test_hh_bad_rows(tmp_path, project, row, error):
    assert _errors(_jsonl(tmp_path / "hh.jsonl", [row]), project, format="hh-rlhf") == [error]


# --- PandaLM ------------------------------------------------------------------------------------
def _panda(idx: int, **fields) -> dict:
    return {
        "idx": idx, "motivation_app": "Test", "cmp_key": "llama-7b_bloom-7b",
        "instruction": f"Instruction {idx}", "input": "", "response1": f"one {idx}",
        "response2": f"two {idx}", "annotator1": 1, "annotator2": 2, "annotator3": 0,
    } | fields  # fmt: skip


def test_pandalm_array_imports_three_annotators_per_item(tmp_path, project):
    items = [
        _panda(0, input="the input"),
        _panda(1),
        _panda(2, response1="one 1", response2="two 1"),
    ]
    items[2]["cmp_key"] = "opt-7b_pythia-6.9b"  # same texts as item 1, other models: its own pair
    items[2]["instruction"] = "Instruction 1"
    path = tmp_path / "testset.json"
    path.write_text(json.dumps(items), encoding="utf-8")
    result = _import(path, project)
    assert (result.format, result.comparisons_created, result.judgements_created) == (
        "pandalm",
        3,
        9,
    )
    first = Comparison.objects.get(external_id="pandalm-0")
    assert first.prompt.text == "Instruction 0\n\nthe input"
    assert (first.response_a.model_name, first.response_b.model_name) == ("llama-7b", "bloom-7b")
    choices = dict(first.judgements.values_list("annotator__username", "choice"))
    assert choices == {
        "pandalm-annotator1": "a",
        "pandalm-annotator2": "b",
        "pandalm-annotator3": "tie",
    }
    assert Response.objects.filter(text="one 1").count() == 2  # each model keeps its own name


def test_pandalm_boolean_response_is_a_row_error_unless_scalars_as_text(tmp_path, project):
    path = tmp_path / "testset.json"
    path.write_text(json.dumps([_panda(0), _panda(1, response1=True)]), encoding="utf-8")
    assert _errors(path, project) == [
        "item 2, field 'response1': must be a string, not bool True "
        "(--scalars-as-text imports it as its JSON text)"
    ]
    _import(path, project, scalars_as_text=True)
    assert Comparison.objects.get(external_id="pandalm-1").response_a.text == "true"


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"annotator2": 3}, "item 1, field 'annotator2': must be 0 (tie), 1 or 2, got 3"),
        ({"instruction": " ", "input": ""},
         "item 1, field 'instruction': instruction and input are both empty"),
        ({"response2": None}, "item 1, field 'response2': is required"),
        ({"input": ["x"]}, "item 1, field 'input': must be a string, not list"),
    ],
)  # fmt: skip
def test_pandalm_bad_items(tmp_path, project, fields, error):
    path = tmp_path / "testset.json"
    path.write_text(json.dumps([_panda(0, **fields)]), encoding="utf-8")
    assert _errors(path, project, format="pandalm") == [error]


# --- MT-Bench / Chatbot Arena --------------------------------------------------------------------
def _vote(question: int, model_a: str, model_b: str, winner: str, judge: str) -> dict:
    return {
        "question_id": question,
        "model_a": model_a,
        "model_b": model_b,
        "winner": winner,
        "judge": judge,
        "turn": 1,
    }


def _fastchat(tmp_path: Path, models: list[str], questions: list[int]) -> tuple[Path, Path]:
    question_file = _jsonl(
        tmp_path / "question.jsonl",
        [{"question_id": q, "category": "writing", "turns": [f"Question {q}?", "And?"]}
         for q in questions],
    )  # fmt: skip
    answers = tmp_path / "model_answer"
    answers.mkdir()
    for model in models:
        _jsonl(
            answers / f"{model}.jsonl",
            [{"question_id": q, "model_id": model,
              "choices": [{"index": 0, "turns": [f"{model} answers {q}", "more"]}]}
             for q in questions],
        )  # fmt: skip
    return question_file, answers


def test_mt_bench_votes_with_texts_by_file_attach_swapped_rows(tmp_path, project):
    votes = [
        _vote(81, "gpt-4", "claude-v1", "model_a", "expert_1"),
        _vote(81, "claude-v1", "gpt-4", "model_a", "expert_2"),  # swapped: claude won
        _vote(81, "claude-v1", "gpt-4", "tie", "author_0"),
        _vote(81, "gpt-4", "claude-v1", "tie", "author_0"),  # same judge, same verdict again
        _vote(82, "gpt-4", "claude-v1", "tie (bothbad)", "expert_1"),
    ]
    path = _jsonl(tmp_path / "judgments.jsonl", votes)
    question_file, answers = _fastchat(tmp_path, ["gpt-4", "claude-v1"], [81, 82])
    call_command(
        "import_comparisons", str(path), "--project", "formats",
        "--questions", str(question_file), "--answers", str(answers),
    )  # fmt: skip
    assert Comparison.objects.count() == 2
    pair = Comparison.objects.get(metadata__question_id="81")
    assert pair.prompt.text == "Question 81?"
    assert (pair.response_a.model_name, pair.response_b.model_name) == ("claude-v1", "gpt-4")
    assert pair.response_a.text == "claude-v1 answers 81"
    votes_by = {j.annotator.username: (j.choice, j.shown_left) for j in pair.judgements.all()}
    assert votes_by == {"expert_1": ("b", "b"), "expert_2": ("a", "a"), "author_0": ("tie", "a")}
    other = Comparison.objects.get(metadata__question_id="82")
    assert other.judgements.get().choice == "both_bad"


def test_mt_bench_without_texts_is_refused_naming_what_is_missing(tmp_path, project):
    path = _jsonl(tmp_path / "judgments.jsonl", [_vote(81, "gpt-4", "claude-v1", "tie", "e")])
    assert _errors(path, project) == [
        "line 1, field 'conversation_a': the row has no conversation text "
        "(conversation_a/conversation_b); give --questions FILE and --answers DIR (FastChat's "
        "question.jsonl and model_answer/) to import it"
    ]


def test_mt_bench_missing_question_or_answer_names_it(tmp_path, project):
    question_file, answers = _fastchat(tmp_path, ["gpt-4", "claude-v1"], [81])
    read = {
        "questions": formats.mt_bench.load_questions(question_file),
        "answers": formats.mt_bench.load_answers(answers),
        "answers_name": "model_answer",
    }
    rows = [
        _vote(99, "gpt-4", "claude-v1", "tie", "e"),
        _vote(81, "gpt-4", "llama-13b", "tie", "e"),
        _vote(81, "gpt-4", "claude-v1", "model_c", "e"),
        _vote(81, "gpt-4", "claude-v1", "tie", "e") | {"turn": 3},
        _vote(81, "gpt-4", "claude-v1", "model_a", "e"),
        _vote(81, "claude-v1", "gpt-4", "model_a", "e"),  # the same judge, another verdict
    ]
    path = _jsonl(tmp_path / "judgments.jsonl", rows)
    errors = _errors(path, project, **read)
    assert errors[:3] == [
        "line 1, field 'question_id': question 99 is not in --questions",
        "line 2, field 'model_b': no answer of 'llama-13b' to question 81 in "
        "model_answer/llama-13b.jsonl",
        "line 3, field 'winner': must be one of ['model_a', 'model_b', 'tie', 'tie (bothbad)'], "
        "got 'model_c'",
    ]
    assert errors[3] == "line 4, field 'turn': turn 3: question 81 has 2 turn(s) in --questions"
    assert errors[4:] == [
        "line 6, field 'judgements': 'e' already judged this comparison on line 5"
    ]


def test_chatbot_arena_rows_carry_their_conversations(tmp_path, project):
    def convo(reply: str) -> list[dict]:
        return [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": reply}]

    row = _vote(7, "vicuna", "alpaca", "model_b", "arena_user_1") | {
        "question_id": "abc123",
        "conversation_a": convo("from vicuna"),
        "conversation_b": convo("from alpaca"),
    }
    result = _import(_jsonl(tmp_path / "arena.jsonl", [row]), project)
    assert result.format == "mt-bench"
    pair = Comparison.objects.get()
    assert (pair.response_a.text, pair.response_b.text) == ("from alpaca", "from vicuna")
    assert pair.judgements.get().choice == "a"


# --- UltraFeedback -------------------------------------------------------------------------------
def _uf(gap_scores: tuple[float, float], reply: str = "good") -> dict:
    user = {"role": "user", "content": "Write a haiku."}
    return {
        "prompt": "Write a haiku.",
        "prompt_id": "p1",
        "chosen": [user, {"role": "assistant", "content": reply}],
        "rejected": [user, {"role": "assistant", "content": "bad"}],
        "score_chosen": gap_scores[0],
        "score_rejected": gap_scores[1],
    }


@pytest.mark.parametrize(
    ("scores", "choice", "strength"),
    [((7.0, 7.0), "tie", 1), ((8.0, 5.0), "a", 1), ((8.5, 5.0), "a", 2), ((10.0, 1.0), "a", 3)],
)
def test_ultrafeedback_score_gap_becomes_the_strength(tmp_path, project, scores, choice, strength):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "train_prefs.parquet"
    pq.write_table(pa.Table.from_pylist([_uf(scores)]), path)
    result = _import(path, project)
    assert result.format == "ultrafeedback"
    judgement = Judgement.objects.get()
    assert (judgement.annotator.username, judgement.choice, judgement.strength) == (
        "ultrafeedback-gpt4",
        choice,
        strength,
    )
    assert Comparison.objects.get().metadata["score_chosen"] == scores[0]


@pytest.mark.parametrize(
    ("row", "error"),
    [
        (_uf((3.0, 5.0)), "line 1, field 'score_rejected': is higher than score_chosen"),
        (_uf((7.0, 5.0)) | {"score_chosen": "high"},
         "line 1, field 'score_chosen': must be a number, got 'high'"),
        (_uf((7.0, 5.0), reply="bad"), "line 1, field 'response_b': is identical to response_a"),
    ],
)  # fmt: skip
def test_ultrafeedback_bad_rows(tmp_path, project, row, error):
    path = _jsonl(tmp_path / "uf.jsonl", [row])
    assert _errors(path, project, format="ultrafeedback") == [error]


# --- HelpSteer2 ----------------------------------------------------------------------------------
def test_helpsteer2_strength_and_per_annotator_rows(tmp_path, project):
    rows = [
        {"prompt": "P1", "response_1": "r1", "response_2": "r2", "preference_strength": -2},
        {"prompt": "P2", "response_1": "s1", "response_2": "s2", "preference_strength": 1,
         "all_preferences_unprocessed": [1, 3, 0]},
    ]  # fmt: skip
    path = tmp_path / "preference.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    result = _import(path, project)
    assert (result.format, result.comparisons_created, result.judgements_created) == (
        "helpsteer2",
        2,
        4,
    )
    first = Comparison.objects.get(prompt__text="P1").judgements.get()
    assert (first.annotator.username, first.choice, first.strength) == ("helpsteer2", "a", 2)
    second = Comparison.objects.get(prompt__text="P2")
    assert sorted(second.judgements.values_list("annotator__username", "choice", "strength")) == [
        ("helpsteer2-rater1", "b", 1),
        ("helpsteer2-rater2", "b", 3),
        ("helpsteer2-rater3", "tie", 1),
    ]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"preference_strength": 4},
         "line 1, field 'preference_strength': must be an integer from -3 to 3, got 4"),
        ({"all_preferences_unprocessed": [1, "x"]},
         "line 1, field 'all_preferences_unprocessed[1]': must be an integer from -3 to 3, got 'x'"),
        ({"prompt": ""}, "line 1, field 'prompt': must not be empty"),
    ],
)  # fmt: skip
def test_helpsteer2_bad_rows(tmp_path, project, fields, error):
    row = {"prompt": "P", "response_1": "a", "response_2": "b", "preference_strength": 0} | fields
    path = _jsonl(tmp_path / "hs.jsonl", [row])
    assert _errors(path, project, format="helpsteer2") == [error]


# --- Detection -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("record", "name"),
    [
        ({"prompt": "Q", "response_a": "a", "response_b": "b"}, "concord"),
        (_panda(0), "pandalm"),
        ({"response_1": "a", "response_2": "b", "preference_strength": 0}, "helpsteer2"),
        (_vote(1, "a", "b", "tie", "j"), "mt-bench"),
        (_uf((1, 1)), "ultrafeedback"),
        (HH, "hh-rlhf"),
        ({"prompt": "Q", "chosen": "a", "rejected": "b"}, "trl"),
    ],
)
def test_auto_detects_each_format(record, name):
    assert formats.detect(record) == name


def test_row_error_names_its_field():
    error = RowError("chosen", "is required")
    assert (error.field, str(error)) == ("chosen", "chosen: is required")


@pytest.mark.parametrize("kind", ["gzip", "zstd", "parquet"])
def test_truncated_or_corrupt_container_is_one_clear_error(tmp_path, project, kind):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    text = "".join(json.dumps(r) + "\n" for r in CONCORD_ROWS).encode()
    path = tmp_path / "rows.bin"
    if kind == "parquet":
        pq.write_table(pa.Table.from_pylist(CONCORD_ROWS), path)
        data = path.read_bytes()
        path.write_bytes(data[:4] + b"\x00" * (len(data) - 4))
    else:
        packed = (
            gzip.compress(text) if kind == "gzip" else zstandard.ZstdCompressor().compress(text)
        )
        path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(formats.SourceError):
        _import(path, project)
    assert not Comparison.objects.exists()
