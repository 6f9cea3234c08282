"""Create the "Machine judge" group: the model judges' machine accounts, which never count as people."""

from django.db import migrations

NAME = "Machine judge"


def create_group(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.get_or_create(name=NAME)


def delete_group(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("common", "0001_roles")]

    operations = [migrations.RunPython(create_group, delete_group)]
