"""`python manage.py agreement --project SLUG --json` end to end: JSONL -> import_comparisons ->
judgements in the database -> arrays -> report -> JSON with the keys of ARCHITECTURE.md."""

import json

import numpy as np
import pytest
from django.core.management import CommandError
from django.db import connection
from django.db.models import BigIntegerField
from django.db.models.functions import Cast

from annotation import agreement
from annotation.models import Judgement, Project
from annotation.selectors.agreement import (
    _bulk_reads,
    _comparison_columns,
    _int_columns,
    _judgement_columns,
)
from annotation.services.agreement import SUMMARY_KEYS, project_consensus
from tests.helpers.agreement_jsonl import (
    agreement_json,
    import_file,
    run,
    synthetic_rows,
    write_jsonl,
)
from tests.helpers.shared_data import PANDALM_CHOICE, PANDALM_TESTSET, pandalm_labels

pytestmark = pytest.mark.django_db
CODE = {name: code for code, name in enumerate(agreement.CHOICES)}


def _expected(rows: list[dict], *, overlap: int, n_categories: int) -> dict:
    """The coefficients worked out from the JSONL rows themselves with the public pure functions."""
    names = sorted({j["annotator"] for row in rows for j in row["judgements"]})
    data = np.full((len(names), len(rows)), np.nan)
    for i, row in enumerate(rows):
        for j in row["judgements"]:
            data[names.index(j["annotator"]), i] = CODE[j["choice"]]
    counts = np.stack([(data == c).sum(axis=0) for c in range(4)], axis=1)
    full = counts[counts.sum(axis=1) >= overlap]
    return {
        "names": names,
        "data": data,
        "fleiss_kappa": agreement.fleiss_kappa(full[:, full.sum(axis=0) > 0]),
        "krippendorff_alpha": agreement.krippendorff_alpha(data),
        "gwet_ac1": agreement.gwet_ac1(data, n_categories=n_categories),
        "percent_agreement": agreement.percent_agreement(counts),
        "percent_agreement_no_ties": agreement.percent_agreement_no_ties(counts),
    }


def test_agreement_json_end_to_end_synthetic(tmp_path):
    """Import 90 comparisons with judgements, then `agreement --json` prints exactly the keys of
    ARCHITECTURE.md with the values the pure functions give on the file's own rows."""
    rows = synthetic_rows()
    import_file(write_jsonl(tmp_path / "synthetic.jsonl", rows), "synthetic")
    summary = agreement_json("synthetic")
    assert tuple(summary) == SUMMARY_KEYS
    expected = _expected(rows, overlap=3, n_categories=3)
    assert (summary["n_items"], summary["n_judgements"], summary["n_annotators"]) == (90, 264, 5)
    for name in agreement.COEFFICIENTS:
        assert summary[name] == pytest.approx(expected[name], abs=1e-6), name
    names = expected["names"]
    data = expected["data"]
    assert len(summary["cohen_kappa"]) == 10
    for pair in summary["cohen_kappa"]:
        assert set(pair) == {"a", "b", "kappa", "n"}
        first, second = data[names.index(pair["a"])], data[names.index(pair["b"])]
        both = ~np.isnan(first) & ~np.isnan(second)
        assert pair["n"] == both.sum()
        assert pair["kappa"] == pytest.approx(
            agreement.cohen_kappa(first[both], second[both]), abs=1e-6
        )
    by_name = {row["annotator"]: row for row in summary["annotators"]}
    assert set(by_name) == set(names)
    assert sum(row["n_judgements"] for row in by_name.values()) == 264
    assert "position_bias" in by_name["eve"]["flags"]
    assert by_name["eve"]["left_share"] > 0.8
    assert all(row["gold_n"] > 0 for row in by_name.values())


def test_agreement_json_can_add_intervals(tmp_path):
    """--intervals adds 95% bootstrap intervals that hold each estimate."""
    import_file(write_jsonl(tmp_path / "s.jsonl", synthetic_rows(60, seed=1)), "with-intervals")
    summary = agreement_json("with-intervals", "--intervals", "--boot", "300")
    assert tuple(summary) == (*SUMMARY_KEYS, "intervals")
    for name, (low, high) in summary["intervals"].items():
        assert low <= summary[name] <= high


def test_intervals_of_undefined_coefficients_are_null(tmp_path):
    """One judged comparison: no interval can be drawn; its bounds are null, not a crash."""
    rows = [
        {
            "prompt": "p?",
            "response_a": "x",
            "response_b": "y",
            "judgements": [{"annotator": "u1", "choice": "a"}, {"annotator": "u2", "choice": "a"}],
        }
    ]
    import_file(write_jsonl(tmp_path / "one.jsonl", rows), "one-item")
    summary = agreement_json("one-item", "--intervals", "--boot", "50")
    assert summary["intervals"]["fleiss_kappa"] == [None, None]


def test_agreement_text_output_and_errors(tmp_path):
    """Without --json the command prints a readable summary; an unknown slug is a clear error."""
    import_file(write_jsonl(tmp_path / "s.jsonl", synthetic_rows(40, seed=2)), "texty")
    text = run("agreement", "--project", "texty", "--boot", "100")
    assert "fleiss_kappa" in text and "95% CI" in text
    with pytest.raises(CommandError, match="no project"):
        run("agreement", "--project", "missing", "--json")


def test_agreement_json_on_a_project_without_judgements(tmp_path):
    """No judgements: counts are zero and every coefficient is null (JSON has no NaN)."""
    rows = [{"prompt": "p?", "response_a": "x", "response_b": "y"}]
    import_file(write_jsonl(tmp_path / "empty.jsonl", rows), "empty")
    summary = agreement_json("empty")
    assert (summary["n_items"], summary["n_judgements"], summary["annotators"]) == (0, 0, [])
    assert all(summary[name] is None for name in agreement.COEFFICIENTS)


def test_packed_columns_read_the_same_rows_as_values_list(tmp_path):
    """On PostgreSQL the arrays come packed in one bytea per column; they equal values_list's rows,
    row for row (the columns stay aligned)."""
    import_file(write_jsonl(tmp_path / "s.jsonl", synthetic_rows(30, seed=3)), "copy-check")
    project = Project.objects.get(slug="copy-check")
    with _bulk_reads():
        fast = _judgement_columns(project)
        comparisons = _comparison_columns(project)
    queryset = Judgement.objects.filter(comparison__project=project).order_by()
    assert fast.shape == (queryset.count(), 6)
    plain = sorted(queryset.values_list("comparison_id", "annotator_id", "elapsed_ms"))
    assert sorted(map(tuple, fast[:, [0, 1, 4]].tolist())) == plain
    assert comparisons[:, 0].tolist() == sorted(project.comparisons.values_list("id", flat=True))
    assert _int_columns(queryset.none().values("id"), ["id"]).shape == (0, 1)


def test_packed_columns_in_many_groups_stay_aligned_and_ordered(tmp_path, monkeypatch):
    """With one packed group per id (as a project of millions is read, in groups of ids), every
    row's columns stay together, and an ordered read comes back in order."""
    from annotation.selectors import agreement as selectors

    import_file(write_jsonl(tmp_path / "s.jsonl", synthetic_rows(30, seed=6)), "groups")
    project = Project.objects.get(slug="groups")
    monkeypatch.setattr(selectors, "_GROUP_SHIFT", 0)
    with _bulk_reads():
        with connection.cursor() as cursor:  # groups by hash, out of order, as on a big table
            cursor.execute("SET LOCAL enable_sort = off")
        fast = _judgement_columns(project)
        comparisons = _comparison_columns(project)
    queryset = Judgement.objects.filter(comparison__project=project).order_by()
    plain = sorted(queryset.values_list("comparison_id", "annotator_id", "elapsed_ms"))
    assert sorted(map(tuple, fast[:, [0, 1, 4]].tolist())) == plain
    assert comparisons[:, 0].tolist() == sorted(project.comparisons.values_list("id", flat=True))


def test_packed_columns_refuse_nulls(tmp_path):
    """A NULL would drop out of one column's aggregate and misalign the rows: it is refused."""
    import_file(write_jsonl(tmp_path / "s.jsonl", synthetic_rows(10, seed=5)), "null-check")
    queryset = Judgement.objects.filter(comparison__project__slug="null-check").order_by()
    Judgement.objects.filter(pk=queryset.first().pk).update(elapsed_ms=None)
    with pytest.raises(ValueError, match="NULL"):
        _int_columns(
            queryset.annotate(
                c_id=Cast("id", BigIntegerField()), c_ms=Cast("elapsed_ms", BigIntegerField())
            ),
            ["c_id", "c_ms"],
        )


def test_project_consensus_majority_and_dawid_skene(tmp_path):
    """Both consensus methods give a choice, a posterior over the four choices and a margin for every
    judged comparison."""
    import_file(write_jsonl(tmp_path / "s.jsonl", synthetic_rows(50, seed=4)), "consensus")
    project = Project.objects.get(slug="consensus")
    for method in ("majority", "dawid_skene"):
        result = project_consensus(project=project, method=method)
        assert len(result) == 50
        for row in result.values():
            assert sum(row["posterior"].values()) == pytest.approx(1.0, abs=1e-5)
            assert row["margin"] is None or 0 <= row["margin"] <= 1
    with pytest.raises(ValueError, match="unknown consensus"):
        project_consensus(project=project, method="vibes")


def _pandalm_rows() -> list[dict]:
    """PandaLM's test set as import rows: prompt = instruction (+ input), response1 -> A, response2 ->
    B, annotator1..3 -> judgements. Texts come from pandalm_testset-v1.json when present (else
    placeholders). Rows with an empty response are skipped (the importer refuses them), and of rows
    with identical content only the first is kept (the importer merges them, which would put the
    same annotator twice on one comparison)."""
    labels = pandalm_labels()
    texts = (
        json.loads(PANDALM_TESTSET.read_text(encoding="utf-8")) if PANDALM_TESTSET.is_file() else []
    )
    rows, seen = [], set()
    for index, label in enumerate(labels):
        if texts:
            item = texts[index]
            prompt = item["instruction"] + (f"\n\n{item['input']}" if item["input"] else "")
            response_a, response_b = str(item["response1"]), str(item["response2"])
        else:
            prompt = f"PandaLM item {label['idx']}"
            response_a, response_b = (
                f"response 1 of {label['idx']}",
                f"response 2 of {label['idx']}",
            )
        key = (prompt, response_a, response_b)
        if not response_a.strip() or not response_b.strip() or key in seen:
            continue
        seen.add(key)
        rows.append(
            {"id": label["idx"], "prompt": prompt, "response_a": response_a,
             "response_b": response_b, "model_a": label["cmp_key"].split("_")[0],
             "model_b": label["cmp_key"].split("_")[1],
             "judgements": [{"annotator": f"pandalm-annotator{k}",
                             "choice": PANDALM_CHOICE[label[f"annotator{k}"]]} for k in (1, 2, 3)]}
        )  # fmt: skip
    return rows


def test_agreement_json_on_pandalm_real_data(tmp_path):
    """Real multi-annotator data (PandaLM, 3 annotators per pair; skipped when absent) imported through
    import_comparisons: `agreement --json` equals statsmodels' Fleiss, the krippendorff package's
    alpha and scikit-learn's per-pair Cohen on the rows of the file."""
    rows = _pandalm_rows()
    import_file(write_jsonl(tmp_path / "pandalm.jsonl", rows), "pandalm")
    summary = agreement_json("pandalm")
    assert tuple(summary) == SUMMARY_KEYS
    assert summary["n_items"] == len(rows) > 700
    assert summary["n_judgements"] == 3 * len(rows)
    assert summary["n_annotators"] == 3
    labels = np.array([[CODE[j["choice"]] for j in row["judgements"]] for row in rows])
    inter_rater = pytest.importorskip("statsmodels.stats.inter_rater")
    krippendorff = pytest.importorskip("krippendorff")
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    counts, _ = inter_rater.aggregate_raters(labels)
    assert summary["fleiss_kappa"] == pytest.approx(inter_rater.fleiss_kappa(counts), abs=1e-6)
    assert summary["krippendorff_alpha"] == pytest.approx(
        krippendorff.alpha(reliability_data=labels.T.astype(float), level_of_measurement="nominal"),
        abs=1e-6,
    )
    column = {f"pandalm-annotator{k}": k - 1 for k in (1, 2, 3)}
    for pair in summary["cohen_kappa"]:
        expected = sklearn_metrics.cohen_kappa_score(
            labels[:, column[pair["a"]]], labels[:, column[pair["b"]]]
        )
        assert pair["kappa"] == pytest.approx(expected, abs=1e-6)
        assert pair["n"] == len(rows)
