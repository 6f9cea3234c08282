"""Helpers shared by test modules (imported, never collected): tiny models and data
(``tiny_models``), recipe configs and callbacks (``recipes``), and a Celery worker subprocess
(``worker``). Fixtures defined here reach a test folder through its conftest.py."""
