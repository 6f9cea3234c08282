"""Application errors: raised by services at the edge, shown to the user as they are."""


class ConcordError(Exception):
    """Base class of errors whose message is meant for the user."""


class ModelUnavailableError(ConcordError):
    """A registered model is missing, or the package it comes from is not installed."""
