from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ConsoleConfig(AppConfig):
    default = True
    name = "console"
    verbose_name = "Operator console"


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with the console as its default site: `admin.site` and
    `@admin.register` everywhere register on the TOTP-protected console."""

    default = False  # "console" itself means ConsoleConfig
    default_site = "console.sites.ConsoleSite"
