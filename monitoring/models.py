"""Alerts, human-eval rounds and stopping decisions live here (the monitoring and human-eval issues)."""
