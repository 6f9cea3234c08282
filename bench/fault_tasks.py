"""A harmless task for the broker fault script, on the project's real Celery app: it appends its
token to a file, one line per execution, so the script can tell a lost task from one run twice.

Workers load it with ``celery -A config worker --include fault_tasks`` (bench/ on PYTHONPATH).
"""

from config.celery import app


@app.task(name="bench.fault_tasks.record_execution")
def record_execution(token: str, path: str) -> None:
    with open(path, "a") as out:  # O_APPEND: whole lines, even from several worker processes
        out.write(token + "\n")
