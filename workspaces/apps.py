from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    verbose_name = "Workspaces, access and audit"

    def ready(self):
        from workspaces.metrics import connect_celery_signals

        connect_celery_signals()  # job durations by kind (workspaces.metrics)
