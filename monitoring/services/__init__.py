"""Writes of the monitoring app, one module per concern: eval rounds (creation, generation,
ratings, decisions), model judges (creation, runs, verdicts) and a round's judge. Views, commands and
tasks call these functions; reads live in ``monitoring.selectors``."""
