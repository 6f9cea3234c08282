"""Training runs, checkpoints, dataset snapshots and run metrics live here (the training-jobs issue)."""
