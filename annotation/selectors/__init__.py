"""Reads of the annotation app, one module per page family: projects, labelling, agreement,
clustering. Writes live in ``annotation.services``."""
