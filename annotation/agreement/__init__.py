"""Agreement between annotators, their biases, and consensus labels: pure NumPy/SciPy, no Django.

Public coefficients (names and data layouts are fixed by ARCHITECTURE.md):

- ``cohen_kappa(rater1, rater2, *, weights=None)``: two raters, labels of any sortable type.
- ``fleiss_kappa(counts)`` and ``fleiss_category_kappas(counts)``: ``counts[i, k]`` = raters who put
  item i in category k.
- ``krippendorff_alpha(data, *, level="nominal")`` and ``gwet_ac1(data)``: ``data[r, i]`` = rater r's
  value for item i, NaN when missing.

The project report (``agreement_report``) works on columnar judgements (``JudgementTable``) and never
builds the raters x items matrix: every coefficient it needs is a function of the per-item category
counts, so 1,000,000 judgements cost a few bincounts. Bootstrap intervals resample comparisons; because
the nominal coefficients depend on an item only through its count vector, a resample is a multinomial
draw over the distinct count patterns (a few dozen for 3 raters), which makes 1,000 replicates cheap.

Category codes used by the report: ``CHOICES = ("a", "b", "tie", "both_bad")`` -> 0, 1, 2, 3.
"""

from annotation.agreement.bias import (
    DEFAULT_THRESHOLDS,
    AnnotatorStats,
    BiasThresholds,
    JudgementTable,
    _binomial_two_sided,
    annotator_stats,
    holm_adjust,
    leave_one_out_consensus,
)
from annotation.agreement.bootstrap import (
    Interval,
    PairwiseKappa,
    bootstrap_interval,
    coefficient_intervals,
    count_patterns,
    pairwise_cohen,
)
from annotation.agreement.coefficients import (
    BOTH_BAD,
    CHOICES,
    COEFFICIENTS,
    LEVELS,
    MISSING,
    N_CHOICES,
    TIE,
    A,
    B,
    Level,
    ac1_from_counts,
    alpha_from_counts,
    cohen_kappa,
    fleiss_category_kappas,
    fleiss_kappa,
    gwet_ac1,
    item_counts,
    krippendorff_alpha,
    percent_agreement,
    percent_agreement_no_ties,
)
from annotation.agreement.consensus import (
    SPLITS,
    Consensus,
    DawidSkene,
    StoredFigures,
    dawid_skene,
    majority_vote,
    posterior_given_fit,
    side_margin,
    stored_figures,
    table_dawid_skene,
    top_choice,
)
from annotation.agreement.groups import (
    GroupAgreement,
    agreement_by_group,
)
from annotation.agreement.report import (
    AgreementReport,
    agreement_report,
)
from annotation.agreement.suggestions import (
    SuggestionFigures,
    suggestion_figures,
)

__all__ = [
    "BOTH_BAD",
    "CHOICES",
    "COEFFICIENTS",
    "DEFAULT_THRESHOLDS",
    "LEVELS",
    "MISSING",
    "N_CHOICES",
    "SPLITS",
    "TIE",
    "A",
    "AgreementReport",
    "AnnotatorStats",
    "B",
    "BiasThresholds",
    "Consensus",
    "DawidSkene",
    "GroupAgreement",
    "Interval",
    "JudgementTable",
    "Level",
    "PairwiseKappa",
    "StoredFigures",
    "SuggestionFigures",
    "_binomial_two_sided",
    "ac1_from_counts",
    "agreement_by_group",
    "agreement_report",
    "alpha_from_counts",
    "annotator_stats",
    "bootstrap_interval",
    "coefficient_intervals",
    "cohen_kappa",
    "count_patterns",
    "dawid_skene",
    "fleiss_category_kappas",
    "fleiss_kappa",
    "gwet_ac1",
    "holm_adjust",
    "item_counts",
    "krippendorff_alpha",
    "leave_one_out_consensus",
    "majority_vote",
    "pairwise_cohen",
    "percent_agreement",
    "percent_agreement_no_ties",
    "posterior_given_fit",
    "side_margin",
    "stored_figures",
    "suggestion_figures",
    "table_dawid_skene",
    "top_choice",
]
