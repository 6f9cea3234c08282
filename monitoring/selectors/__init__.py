"""Reads of the monitoring app, one module per concern: runs (lists, a run's page, comparisons),
eval rounds (results, the stopping panel), prompts (held-out prompts), model judges (reports) and a
round's judge (agreement with the reviewers, prediction-powered estimates)."""
