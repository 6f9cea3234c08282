"""The eval-round world's fixtures (tests/helpers/eval_rounds.py) for the tests here."""

from tests.helpers.eval_rounds import (  # noqa: F401 (fixtures)
    models_dir,
    open_round,
    queued,
    reviewers,
    run_with_checkpoints,
    tiny_tokenizer_dir,
)
