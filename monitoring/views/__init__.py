"""Monitoring pages, one module per page family: runs (list, a run's page, compare), eval rounds
(form, rating screen, results, round judges), judges (a project's judges, a judge's report) and hub
(the every-role overview)."""
