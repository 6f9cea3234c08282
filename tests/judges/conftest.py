"""The judged world's fixtures (tests/helpers/judge_world.py) for the tests here."""

from tests.helpers.judge_world import (  # noqa: F401 (fixtures)
    default_worker,
    gpu_worker,
    judge_models,
    judge_tokenizer_dir,
    judged_project,
    reward_run,
)
