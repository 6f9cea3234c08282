"""Writes of the annotation app, one module per concern: labelling, importing (and import jobs),
exporting, agreement (reports and their cached dashboard), clustering. Views, APIs, commands and
tasks call these functions; reads live in ``annotation.selectors``."""
