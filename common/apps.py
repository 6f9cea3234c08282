from django.apps import AppConfig


class CommonConfig(AppConfig):
    name = "common"
    verbose_name = "Concord common"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        import common.schema  # noqa: F401 - registers the OpenAPI extension of our auth class
        from common.roles import sync_role_permissions

        # Not limited to this app: the permissions of the other apps exist only after their own
        # post_migrate (auth's handler runs first for each app).
        post_migrate.connect(sync_role_permissions)
