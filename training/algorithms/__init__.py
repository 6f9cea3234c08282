"""Pure training maths: tensors in, tensors out, no Django, no model loading, no I/O.

``rewards`` (verifiable rewards by name) and ``unpaired`` (KTO's rows) work on text, in plain Python.
The recipes (``training.recipes``) own devices, data, optimisers and checkpoints and call these.
Each function names the paper equation it implements and gives its shapes in the docstring.
"""

from training.algorithms.advantages import MovingAverageBaseline, gae, rloo_advantages
from training.algorithms.ensemble import (
    ENSEMBLE_OBJECTIVES,
    UWO_LAMBDA,
    EnsembleDisagreement,
    bootstrap_counts,
    bootstrap_weighted_bt,
    ensemble_disagreement,
    ensemble_reward,
)
from training.algorithms.grpo import (
    GRPO_LOSS_NORMS,
    DynamicSampling,
    dynamic_sampling,
    group_advantages,
    grpo_loss,
)
from training.algorithms.kl import (
    AdaptiveKLController,
    FixedKLController,
    KLController,
    LinearKLSchedule,
    VarianceKLScheduler,
    kl_estimate,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_penalized_rewards,
)
from training.algorithms.kto import KTOOutput, kto_balanced_weights, kto_kl_estimate, kto_loss
from training.algorithms.listwise import (
    aspect_regression_loss,
    normalise_ratings,
    plackett_luce_loss,
    weighted_aspect_reward,
)
from training.algorithms.logprobs import (
    entropy_from_logits,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    segment_sum,
    selected_logprobs,
    sequence_logprobs,
    token_logprobs,
)
from training.algorithms.ppo import (
    clipped_value_loss,
    entropy_bonus,
    kl_early_stop,
    ppo_policy_loss,
)
from training.algorithms.preference import DPO_LOSS_TYPES, bradley_terry_loss, dpo_loss
from training.algorithms.reference_free import ORPOOutput, log1mexp, orpo_loss, simpo_loss
from training.algorithms.shaping import (
    RewardNormalizer,
    length_penalty,
    mask_after_first_eos,
    missing_eos_penalty,
    verbosity_penalty,
)

__all__ = [
    "DPO_LOSS_TYPES",
    "ENSEMBLE_OBJECTIVES",
    "GRPO_LOSS_NORMS",
    "UWO_LAMBDA",
    "AdaptiveKLController",
    "DynamicSampling",
    "EnsembleDisagreement",
    "FixedKLController",
    "KLController",
    "KTOOutput",
    "LinearKLSchedule",
    "MovingAverageBaseline",
    "ORPOOutput",
    "RewardNormalizer",
    "VarianceKLScheduler",
    "aspect_regression_loss",
    "bootstrap_counts",
    "bootstrap_weighted_bt",
    "bradley_terry_loss",
    "clipped_value_loss",
    "dpo_loss",
    "dynamic_sampling",
    "ensemble_disagreement",
    "ensemble_reward",
    "entropy_bonus",
    "entropy_from_logits",
    "gae",
    "group_advantages",
    "grpo_loss",
    "kl_early_stop",
    "kl_estimate",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_penalized_rewards",
    "kto_balanced_weights",
    "kto_kl_estimate",
    "kto_loss",
    "length_penalty",
    "log1mexp",
    "mask_after_first_eos",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "missing_eos_penalty",
    "normalise_ratings",
    "orpo_loss",
    "plackett_luce_loss",
    "ppo_policy_loss",
    "rloo_advantages",
    "segment_sum",
    "selected_logprobs",
    "sequence_logprobs",
    "simpo_loss",
    "token_logprobs",
    "verbosity_penalty",
    "weighted_aspect_reward",
]
