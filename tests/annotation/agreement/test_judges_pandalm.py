"""Two published judges measured like annotators on PandaLM's test set (Wang et al., ICLR 2024).

999 response pairs, each labelled by the same 3 annotators, and the verdicts of two model judges on
the same pairs: GPT-3.5 (``gpt35_raw``: '1', '2', 'Tie', or 'garbage' when its answer could not be
read) and PandaLM-7B. Each judge saw response1 first, in one order only, so there is no swap-flip rate
here. Skips without the third-party data (see tests/agreement/shared_data.py).
"""

import json

import numpy as np
import pytest
from statsmodels.stats.inter_rater import cohens_kappa

from annotation.agreement import TIE, A, B, JudgementTable
from annotation.agreement import judges as j
from tests.helpers.shared_data import PANDALM_TESTSET, pandalm_labels, require

CODE = {"0": TIE, "1": A, "2": B, "Tie": TIE}


def _humans(rows: list[dict[str, str]]) -> JudgementTable:
    items = json.loads(require(PANDALM_TESTSET).read_text(encoding="utf-8"))
    # Six responses are JSON booleans, not strings: measure what would be shown.
    length = np.array([[len(str(item[f"response{k}"])) for k in (1, 2)] for item in items])
    n = len(rows)
    return JudgementTable(
        item=np.repeat(np.arange(n), 3),
        annotator=np.tile(np.arange(3), n),
        choice=np.array([CODE[row[f"annotator{k}"]] for row in rows for k in (1, 2, 3)]),
        n_items=n,
        n_annotators=3,
        length_a=length[:, 0],
        length_b=length[:, 1],
    )


def _judge(rows: list[dict[str, str]], column: str) -> j.JudgeVerdicts:
    read = [i for i, row in enumerate(rows) if row[column] in CODE]
    return j.JudgeVerdicts(
        item=np.array(read),
        choice=np.array([CODE[rows[i][column]] for i in read]),
        shown_first=np.full(len(read), A),
        n_items=len(rows),
    )


@pytest.mark.parametrize("column", ["gpt35_raw", "pandalm7b"])
def test_kappa_against_each_annotator_matches_statsmodels(column):
    """Our kappa of a judge against each annotator equals statsmodels' on the same confusion."""
    rows = pandalm_labels()
    humans = _humans(rows)
    judge = _judge(rows, column)
    report = j.judge_report(judge, humans)
    combined = j.combine_orders(judge)
    for r in range(3):
        mine = (humans.annotator == r) & (combined[humans.item] >= 0)
        table = np.zeros((3, 3))
        np.add.at(table, (combined[humans.item[mine]], humans.choice[mine]), 1)
        assert report.kappas.per_human[r] == pytest.approx(cohens_kappa(table).kappa, abs=1e-12)


def test_gpt35_and_pandalm7b_measured_like_annotators():
    """Measured here (no published figure in this form): GPT-3.5's verdict is unreadable on 25 of
    999 pairs; on the rest its kappa with the annotators' majority is 0.493 (the annotators among
    themselves: Fleiss 0.7+, tests/agreement/test_third_party_data.py), PandaLM-7B's 0.435. Neither
    favours the first-shown response (shares 0.491 and 0.485, intervals around 0.5), and neither
    prefers the longer response more than the annotators do (GPT-3.5 a little less: 0.619 against
    0.667)."""
    rows = pandalm_labels()
    humans = _humans(rows)
    gpt = j.judge_report(_judge(rows, "gpt35_raw"), humans)
    panda = j.judge_report(_judge(rows, "pandalm7b"), humans)
    assert (gpt.n_verdicts, panda.n_verdicts) == (974, 999)
    assert gpt.kappas.consensus == pytest.approx(0.493, abs=5e-4)
    assert panda.kappas.consensus == pytest.approx(0.435, abs=5e-4)
    for report, share in ((gpt, 0.491), (panda, 0.485)):
        assert report.position.share == pytest.approx(share, abs=5e-4)
        assert report.position.low < 0.5 < report.position.high
    assert gpt.length.share == pytest.approx(0.619, abs=5e-4)
    assert gpt.length.human_share == pytest.approx(0.667, abs=5e-4)
    assert gpt.length.bias < 0 and gpt.length.p_value < 0.01
    assert abs(panda.length.bias) < 0.02 and panda.length.p_value > 0.05
