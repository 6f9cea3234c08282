"""python manage.py load_demo"""

from django.core.management.base import BaseCommand, CommandError

from annotation.demo import DEMO_PASSWORD, demo_load
from common.errors import ConcordError


class Command(BaseCommand):
    help = (
        "Create the demo projects (pairwise, rating, ranking), their accounts and answers "
        "(safe to run again)."
    )

    def handle(self, *args, **options) -> None:
        try:
            report = demo_load()
        except ConcordError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(report.imported.summary())
        for slug, created in report.items_created.items():
            self.stdout.write(f"{slug}: {created} items created")
        self.stdout.write(f"Demo logins (password {DEMO_PASSWORD!r}):")
        for username, role in report.accounts:
            self.stdout.write(f"  {username:<8} {role}")
