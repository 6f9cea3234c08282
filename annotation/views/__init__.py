"""Annotation pages, one module per page family: projects (lists, the lead's page, imports and
exports), labelling (the annotator's screen), agreement (dashboard), clustering (clusters page)."""
