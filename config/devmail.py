"""The development email backend `dev.py run` uses: Django's file backend keeps each email
whole in a file under EMAIL_FILE_PATH, and one line on stdout says who it is for, its subject
and that file. Printed whole, MIME parts and HTML included, a seeded demo's emails would bury
everything else a developer needs to see. Refused outside debug, like the console and file
backends (config/settings/base.py): emails carry reset links and invitation tokens."""

import uuid
from datetime import datetime
from pathlib import Path

from django.core.mail.backends import filebased


class EmailBackend(filebased.EmailBackend):
    def _get_filename(self) -> str:
        # A file per connection (sluice/mail.py opens one per email). Django names it after the
        # second and id(self), which the next connection reuses within that second.
        if self._fname is None:
            name = f"{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}.eml"
            self._fname = str(Path(self.file_path) / name)
        return self._fname

    def write_message(self, message) -> None:
        super().write_message(message)
        path = Path(self._get_filename())
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        print(f"email to {', '.join(message.recipients())}: {message.subject}  ({shown})",
              flush=True)
