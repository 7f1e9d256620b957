from django.apps import AppConfig


class SluiceConfig(AppConfig):
    name = "sluice"
    verbose_name = "Sluice core"
