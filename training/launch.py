"""``python -m training.launch CONFIG.json``: run one recipe (no Django), for torchrun / deepspeed.

Every rank trains; rank 0 prints one JSON line per logged step and the summary. A file named CANCEL
in the run folder stops the run after the current step (with a checkpoint).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m training.launch CONFIG.json", file=sys.stderr)
        return 2
    from training.recipes import JsonLinesReporter, TrainingCallback, config_from_dict, run_training
    from training.recipes.distributed import teardown_distributed

    config = config_from_dict(json.loads(Path(argv[0]).read_text()))
    cancel_file = Path(config.output_dir) / "CANCEL"

    class CancelFile(TrainingCallback):
        def should_stop(self) -> bool:
            return cancel_file.exists()

    callbacks: list[TrainingCallback] = [CancelFile()]
    if int(os.environ.get("RANK", "0")) == 0:
        callbacks.append(JsonLinesReporter(sys.stdout))
    result = run_training(config, callbacks=callbacks)
    # Only after a run that returned: a rank that raised exits at once, and torchrun stops the
    # others (a barrier here would hold it until the group's timeout instead).
    teardown_distributed()
    return 0 if result.status in ("completed", "cancelled") else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
