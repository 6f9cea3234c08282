"""JSONL import: every bad line and field named, nothing written on error, re-import idempotent."""

import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from annotation.models import Comparison, Judgement, Project, Prompt, Response
from annotation.parsing import ImportValidationError, content_hash, parse_row
from annotation.services.importing import (
    ImportOptions,
    comparisons_import,
    project_get_or_create,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("import_path")]


def _line(**fields) -> str:
    row = {
        "prompt": "Why is the sky blue?",
        "response_a": "Rayleigh scattering.",
        "response_b": "Magic.",
    }
    row.update(fields)
    return json.dumps({k: v for k, v in row.items() if v is not None})


@pytest.fixture
def project():
    return project_get_or_create(slug="sky")[0]


def test_content_hash_ignores_key_order():
    assert content_hash({"a": 1, "b": [1, 2]}) == content_hash({"b": [1, 2], "a": 1})
    assert content_hash("x") != content_hash("y")


def test_minimal_row_imports_prompt_responses_and_comparison(project):
    result = comparisons_import(project=project, lines=[_line()])
    assert (result.comparisons_created, result.comparisons_existing) == (1, 0)
    comparison = Comparison.objects.get()
    assert comparison.prompt.text == "Why is the sky blue?"
    assert comparison.response_a.text == "Rayleigh scattering."
    assert comparison.response_b.text == "Magic."


def test_reimport_creates_nothing_new(project):
    """The same rows again (even in another key order) are recognised by content hash."""
    lines = [_line(), _line(prompt="What is 2+2?", response_a="4", response_b="5")]
    comparisons_import(project=project, lines=lines)
    reordered = [json.dumps(dict(reversed(json.loads(line).items()))) for line in lines]
    again = comparisons_import(project=project, lines=reordered)
    assert (again.comparisons_created, again.comparisons_existing) == (0, 2)
    assert Comparison.objects.count() == 2 and Prompt.objects.count() == 2
    assert Response.objects.count() == 4


def test_conversation_prompt_keeps_messages_and_last_user_turn(project):
    turns = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Tell me a joke."},
    ]
    comparisons_import(project=project, lines=[_line(prompt=turns)])
    prompt = Prompt.objects.get()
    assert prompt.text == "Tell me a joke."
    assert prompt.messages == turns


def test_trl_style_row_puts_chosen_as_a(project):
    line = json.dumps({"prompt": "Q?", "chosen": "good", "rejected": "bad"})
    comparisons_import(project=project, lines=[line])
    comparison = Comparison.objects.get()
    assert (comparison.response_a.text, comparison.response_b.text) == ("good", "bad")
    assert comparison.metadata["trl_preferred"] == "a"


def test_judgements_create_inactive_annotator_accounts(project):
    """Existing judgements bring accounts that cannot log in until activated."""
    line = _line(
        judgements=[
            {"annotator": "zoe", "choice": "a", "strength": 2, "shown_left": "b"},
            {"annotator": "yan", "choice": "tie"},
        ]
    )
    result = comparisons_import(project=project, lines=[line])
    assert (result.judgements_created, result.annotators_created) == (2, 2)
    zoe = get_user_model().objects.get(username="zoe")
    assert not zoe.is_active and not zoe.has_usable_password()
    assert zoe.groups.filter(name="Annotator").exists()
    assert project.members.filter(username="zoe").exists()
    judgement = Judgement.objects.get(annotator=zoe)
    assert (judgement.choice, judgement.strength, judgement.shown_left) == ("a", 2, "b")


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ("{not json", "", "malformed JSON"),
        ("[1, 2]", "", "must be a JSON object"),
        (_line(prompt=None), "prompt", "is required"),
        (_line(response_b=None), "response_b", "is required"),
        (_line(response_a=7), "response_a", "must be a string"),
        (_line(response_b="Rayleigh scattering."), "response_b", "identical to response_a"),
        (_line(gold="maybe"), "gold", "unknown gold answer"),
        (_line(prompt=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]),
         "prompt", "must end with a user turn"),
        (_line(judgements=[{"annotator": "x", "choice": "left"}]), "judgements[0].choice",
         "unknown choice 'left'"),
        (_line(judgements=[{"annotator": "x", "choice": "a", "strength": 5}]),
         "judgements[0].strength", "between 1 and 3"),
        (_line(judgements=[{"annotator": "x", "choice": "a"}, {"annotator": "x", "choice": "b"}]),
         "judgements[1].annotator", "judges this comparison twice"),
    ],
)  # fmt: skip
def test_bad_rows_name_line_and_field(line, field, message):
    errors = parse_row(4, line)
    assert isinstance(errors, list)
    assert errors[0].line == 4 and errors[0].field == field
    assert message in errors[0].message


def test_one_bad_line_imports_nothing(project):
    """All or nothing: good lines before and after a bad one are not written either."""
    lines = [_line(), _line(prompt="Q2", response_a="x", response_b="y", gold="nope"), "{bad"]
    with pytest.raises(ImportValidationError) as caught:
        comparisons_import(project=project, lines=lines)
    assert [(e.line, e.field) for e in caught.value.errors] == [(2, "gold"), (3, "")]
    assert Comparison.objects.count() == 0 and Prompt.objects.count() == 0


def test_same_annotator_on_duplicate_rows_is_an_error(project):
    judged = [{"annotator": "zoe", "choice": "a"}]
    with pytest.raises(ImportValidationError, match="already judged this comparison on line 1"):
        comparisons_import(project=project, lines=[_line(judgements=judged)] * 2)
    assert Judgement.objects.count() == 0


def test_command_creates_project_and_prints_counts(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    path.write_text(_line() + "\n\n" + _line(prompt="Q2", response_a="x", response_b="y") + "\n")
    call_command("import_comparisons", str(path), "--project", "fresh")
    out = capsys.readouterr().out
    assert "created project 'fresh'" in out
    assert "2 rows: 2 comparisons created" in out
    assert Project.objects.get(slug="fresh").comparisons.count() == 2


def test_command_with_bad_file_creates_no_project(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(_line() + "\n{oops\n")
    with pytest.raises(CommandError, match="1 error"):
        call_command("import_comparisons", str(path), "--project", "never")
    assert not Project.objects.filter(slug="never").exists()


def test_command_rejects_bad_slug(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(_line() + "\n")
    with pytest.raises(CommandError, match="not a valid slug"):
        call_command("import_comparisons", str(path), "--project", "Bad Slug")


def test_file_with_bad_encoding_names_the_line(tmp_path, project):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(_line().encode() + b"\n" + b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(ImportValidationError) as caught:
        comparisons_import(project=project, lines=path)
    assert [(e.line, e.message[:17]) for e in caught.value.errors] == [(2, "not valid UTF-8 (")]
    assert not Comparison.objects.exists()


def test_file_with_byte_order_mark_imports(tmp_path, project):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + _line().encode() + b"\n")
    assert comparisons_import(project=project, lines=path).comparisons_created == 1


def test_oversized_line_is_refused(project):
    huge = _line(response_a="x" * 1_100_000)
    with pytest.raises(ImportValidationError, match="longer than 1000000 bytes"):
        comparisons_import(project=project, lines=[huge])


def test_rows_that_only_look_unstorable_import_as_written(project):
    """The row's JSON text decides only whether its value is walked for NUL characters and depth:
    an escaped backslash before "u0000" and brackets inside texts are ordinary text."""
    lines = [
        _line(response_a="C:\\u0000 is a path"),
        _line(prompt="[" * 70 + "?", response_a="{" * 70, response_b="]"),
    ]
    assert comparisons_import(project=project, lines=lines).comparisons_created == 2
    assert Response.objects.filter(text="C:\\u0000 is a path").exists()
    assert Prompt.objects.filter(text="[" * 70 + "?").exists()


def test_large_file_spanning_chunks_imports_exactly(tmp_path, project, monkeypatch):
    """2,500 rows over chunks of 1,000, with a repeated comparison in a later chunk merged into
    the first and a judgement on it from another annotator: counts and overlap slots are exact.
    The repeated row's comparison was created by this import, so it is not "already present"
    (the count is of comparisons the project held before, whatever the chunks)."""
    path = tmp_path / "big.jsonl"
    with path.open("w") as out:
        for i in range(2500):
            out.write(
                _line(
                    prompt=f"Question {i}?",
                    response_a=f"A{i}",
                    response_b=f"B{i}",
                    judgements=[{"annotator": f"ann{i % 7}", "choice": "a"}],
                )
                + "\n"
            )
        repeat = {"annotator": "late", "choice": "b"}
        out.write(
            _line(prompt="Question 3?", response_a="A3", response_b="B3", judgements=[repeat])
        )
    phases: list[tuple[str, int, int | None]] = []
    result = comparisons_import(
        project=project, lines=path, progress=lambda *args: phases.append(args)
    )
    assert (result.rows, result.comparisons_created, result.comparisons_existing) == (2501, 2500, 0)
    assert (result.judgements_created, result.annotators_created) == (2501, 8)
    assert Comparison.objects.get(external_id="", prompt__text="Question 3?").taken == 2
    assert phases[-1] == ("importing", 2501, 2501)
    assert ("validating", 1000, 2501) in phases  # the total: the file's lines, counted first
    again = comparisons_import(project=project, lines=path)
    assert (again.comparisons_created, again.comparisons_existing) == (0, 2500)  # each once
    assert (again.judgements_created, again.judgements_existing) == (0, 2501)


_ROW = '"prompt": "Q", "response_a": "x", "response_b": "y"'


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ("[" * 100_000, "", "nested too deeply (at most 64 levels)"),
        ("{" + _ROW + ', "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}", "",
         "nested too deeply"),
        ("{" + _ROW + ', "metadata": ' + '{"a": ' * 65 + "1" + "}" * 65 + "}", "",
         "nested too deeply"),
        ("{" + _ROW + ', "metadata": {"x": NaN}}', "", "NaN is not a number JSON allows"),
        ("{" + _ROW + ', "metadata": {"x": -Infinity}}', "", "-Infinity is not a number"),
        ("{" + _ROW + ', "metadata": {"x": 1e999}}', "", "1e999 is out of the range of a double"),
        ("{" + _ROW + ', "metadata": {"x": ' + "9" * 5000 + "}}", "",
         "unacceptable JSON number: Exceeds the limit (4300 digits)"),
        ("{" + _ROW + ', "metadata": {"x\\u0000": 1}}', "", "NUL character"),
        (_line(response_b="a\u0000b"), "", "NUL character"),
        (_line(id=int("9" * 201)), "id", "at most 200 characters"),
        (_line(model_a="m" * 201), "model_a", "at most 200 characters"),
        (_line(judgements=[{"annotator": "x", "choice": "a", "elapsed_ms": 2**31}]),
         "judgements[0].elapsed_ms", "from 0 to 2147483647"),
    ],
)  # fmt: skip
def test_hostile_lines_are_refused_with_a_line_error_and_change_nothing(
    project, line, field, message
):
    """Lines Python's json parser chokes on (RecursionError, huge integers) or accepts although
    the database would not store them (NaN, infinities, NUL, too long, too large) are line errors
    found before anything is written, never an exception from the write half-way."""
    good = _line(prompt="fine", response_a="1", response_b="2")
    with pytest.raises(ImportValidationError) as caught:
        comparisons_import(project=project, lines=[good, line])
    (error,) = caught.value.errors
    assert (error.line, error.field) == (2, field)
    assert message in error.message
    assert not Prompt.objects.exists() and not Comparison.objects.exists()


def test_deepest_accepted_metadata_is_stored(project):
    """64 levels of metadata are within the limit and round-trip through the database."""
    deep = '{"a": ' * 63 + "1" + "}" * 63
    line = "{" + _ROW + ', "metadata": ' + deep + "}"
    comparisons_import(project=project, lines=[line])
    stored = Comparison.objects.get().metadata
    for _ in range(63):
        stored = stored["a"]
    assert stored == 1


def test_zip_archive_is_refused_by_the_command_path(tmp_path, project):
    """A zip archive given to the import is one clear error, never unpacked (gzip and zstd JSONL
    are read now: see test_formats.py)."""
    import zipfile

    path = tmp_path / "rows.jsonl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("rows.jsonl", _line() + "\n")
    with pytest.raises(ValueError, match=r"rows\.jsonl is a zip archive"):
        comparisons_import(project=project, lines=path)
    assert not Comparison.objects.exists()


def _answer(prompt_text: str = "Why is the sky blue?"):
    return Prompt.objects.get(text=prompt_text).metadata.get("answer")


@pytest.mark.parametrize(
    ("fields", "stored"),
    [
        ({"answer": "Rayleigh"}, "Rayleigh"),
        ({"metadata": {"answer": "Rayleigh", "source": "quiz"}}, "Rayleigh"),
        ({"answer": 42}, "42"),  # a number is kept as its text, as GRPO's loader reads it
        ({"answer": "42", "metadata": {"answer": 42}}, "42"),  # both, agreeing
        ({"metadata": {"answer": None}}, None),  # null is no answer
        ({}, None),
    ],
)
def test_row_answer_lands_in_the_prompts_metadata(project, fields, stored):
    """A row's ``answer`` (or ``metadata.answer``) is its prompt's reference answer, stored as text in
    ``Prompt.metadata["answer"]``; the comparison keeps the row's metadata as before."""
    comparisons_import(project=project, lines=[_line(**fields)])
    assert _answer() == stored
    assert Comparison.objects.get().metadata == fields.get("metadata", {})


def test_answer_given_on_a_later_row_of_the_prompt_fills_it_in(project):
    """Two comparisons of one prompt, the answer on the second only (in the same chunk, and on a
    re-import of a file that now has it): the prompt gets it; nothing else changes."""
    comparisons_import(project=project, lines=[_line(), _line(response_b="Dust.", answer="light")])
    assert _answer() == "light"
    other = project_get_or_create(slug="sky-2")[0]
    comparisons_import(project=other, lines=[_line()])
    result = comparisons_import(project=other, lines=[_line(answer="light")])
    assert (result.comparisons_created, result.comparisons_existing) == (0, 1)
    assert Prompt.objects.get(project=other).metadata == {"answer": "light"}


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"answer": ["4", "four"]}, "answer", "must be a text or a number, not list"),
        ({"answer": True}, "answer", "must be a text or a number, not bool"),
        ({"metadata": {"answer": {"x": 1}}}, "metadata.answer", "not dict"),
        ({"answer": "  "}, "answer", "must not be empty"),
        (
            {"answer": "4", "metadata": {"answer": "5"}},
            "answer",
            "'4' differs from metadata.answer",
        ),
    ],
)
def test_bad_answer_names_the_field_and_imports_nothing(project, fields, field, message):
    with pytest.raises(ImportValidationError) as caught:
        comparisons_import(project=project, lines=[_line(), _line(response_b="Dust.", **fields)])
    (error,) = caught.value.errors
    assert (error.line, error.field) == (2, field)
    assert message in error.message
    assert not Prompt.objects.exists() and not Comparison.objects.exists()


def test_two_answers_for_one_prompt_in_a_file_are_an_error(project):
    """One prompt, one answer: a later row giving it another is refused with both lines named."""
    lines = [_line(answer="light"), _line(response_b="Dust.", answer="dust")]
    with pytest.raises(ImportValidationError) as caught:
        comparisons_import(project=project, lines=lines)
    (error,) = caught.value.errors
    assert (error.line, error.field) == (2, "answer")
    assert "'dust' differs from the answer 'light' given to the same prompt on line 1" in str(error)
    assert not Prompt.objects.exists()


def test_an_answer_other_than_the_stored_one_is_an_error_and_changes_nothing(project):
    comparisons_import(project=project, lines=[_line(answer="light")])
    with pytest.raises(ImportValidationError, match="the project already has for this prompt"):
        comparisons_import(
            project=project, lines=[_line(response_b="Dust.", answer="dust"), _line(prompt="Hi")]
        )
    assert _answer() == "light"
    assert Comparison.objects.count() == 1 and Prompt.objects.count() == 1


def test_skip_invalid_sets_aside_a_conflicting_answer(tmp_path, project):
    """With skip_invalid the row that contradicts the prompt's answer is rejected, the rest imported."""
    path = tmp_path / "rows.jsonl"
    path.write_text(
        "\n".join([_line(answer="light"), _line(response_b="Dust.", answer="dust")]) + "\n"
    )
    result = comparisons_import(
        project=project, lines=path, options=ImportOptions(skip_invalid=True)
    )
    assert (result.rows_rejected, result.comparisons_created) == (1, 1)
    assert _answer() == "light"
    (rejected,) = [json.loads(x) for x in Path(result.rejects_path).read_text().splitlines()]
    assert rejected["errors"][0]["field"] == "answer"


def test_trl_rows_carry_their_answer(tmp_path, project):
    path = tmp_path / "prefs.jsonl"
    path.write_text(json.dumps({"prompt": "2+2?", "chosen": "4", "rejected": "5", "answer": 4}))
    comparisons_import(project=project, lines=path, options=ImportOptions(format="trl"))
    assert _answer("2+2?") == "4"
