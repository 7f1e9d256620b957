from django.conf import settings
from django.db import models


class VerifiedEmail(models.Model):
    """A user proved they receive mail at `email`. Only the user's current address counts, so a
    changed address has to be verified again."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="verified_emails"
    )
    email = models.EmailField()
    verified_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "email"], name="verified_email_unique"),
        ]

    def __str__(self) -> str:
        return self.email
