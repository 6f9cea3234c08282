"""Put the machine accounts of judges made before the "Machine judge" group existed into it, so their
judgements stop counting as people's (common.roles.human_judgements)."""

from django.db import migrations

NAME = "Machine judge"


def mark_machines(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Judge = apps.get_model("monitoring", "Judge")
    group, _ = Group.objects.get_or_create(name=NAME)
    group.user_set.add(*Judge.objects.values_list("annotator_id", flat=True))


class Migration(migrations.Migration):
    dependencies = [("monitoring", "0003_judges"), ("common", "0002_machine_judge")]

    operations = [migrations.RunPython(mark_machines, migrations.RunPython.noop)]
