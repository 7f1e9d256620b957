"""dev.py run keeps its banner in view: quiet unless -v, the banner once the output has settled,
and emails one line each (config/devmail.py) with the whole email in a file."""

import io
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from django.core import mail
from honcho.printer import Message

import dev

ROOT = Path(__file__).resolve().parent.parent


def _processes(*, verbose: bool) -> dict[str, list[str]]:
    processes = dev.run_processes(py="python", port="8000", base_url="http://127.0.0.1:8000",
                                  sim_port=9100, gateway_port=8080, verbose=verbose)
    return {name: [str(arg) for arg in argv] for name, argv in processes.items()}


def _level(argv: list[str]) -> str:
    return argv[argv.index("--loglevel") + 1]


def test_run_logs_warnings_only_unless_verbose():
    quiet, verbose = _processes(verbose=False), _processes(verbose=True)
    assert "--access-log" not in quiet["web"] and "--access-log" in verbose["web"]
    assert (_level(quiet["worker"]), _level(quiet["beat"])) == ("WARNING", "WARNING")
    assert (_level(verbose["worker"]), _level(verbose["beat"])) == ("INFO", "INFO")


def test_run_refuses_arguments_it_does_not_know():
    result = subprocess.run([sys.executable, "dev.py", "run", "--verbose"], cwd=ROOT,  # noqa: S603
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "usage: python3 dev.py run [-v]" in result.stderr


def _line(text: str) -> Message:
    return Message(type="line", data=text, time=datetime.now(), name="worker", colour=None)


def test_the_banner_waits_until_the_output_has_settled():
    printer = dev.lull_printer(io.StringIO(), colour=False)
    last_write = []

    def chatter():
        for n in range(8):
            printer.write(_line(f"line {n}\n"))
            last_write.append(time.monotonic())
            time.sleep(0.1)

    writer = threading.Thread(target=chatter)
    writer.start()
    dev.lull_wait(printer, quiet=0.5, longest=60)
    writer.join()
    assert time.monotonic() - last_write[-1] >= 0.5
    assert printer.output.getvalue().count("worker | line") == 8


def test_the_banner_does_not_wait_for_ever_on_endless_output():
    printer = dev.lull_printer(io.StringIO(), colour=False)
    stop = threading.Event()

    def endless():
        while not stop.is_set():
            printer.write(_line("chatter\n"))
            time.sleep(0.05)

    writer = threading.Thread(target=endless)
    writer.start()
    try:
        dev.lull_wait(printer, quiet=5, longest=0.5)
        assert writer.is_alive()  # returned while the output still ran
    finally:
        stop.set()
        writer.join()


def test_an_email_is_one_line_and_a_file_holding_it_whole(settings, tmp_path, capsys):
    settings.EMAIL_BACKEND = "config.devmail.EmailBackend"
    settings.EMAIL_FILE_PATH = tmp_path
    message = mail.EmailMultiAlternatives("Confirm your address", "Open http://x.test/confirm/abc",
                                          "Sluice <no-reply@sluice.dev>", ["owner@acme.test"])
    message.attach_alternative("<p>Open <a href='http://x.test/confirm/abc'>this</a></p>",
                               "text/html")
    assert message.send() == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    [path] = tmp_path.iterdir()
    assert out[0] == f"email to owner@acme.test: Confirm your address  ({path})"
    whole = path.read_text()
    assert "Subject: Confirm your address" in whole
    assert "Open http://x.test/confirm/abc" in whole and "text/html" in whole


def test_each_email_has_a_file_of_its_own(settings, tmp_path, capsys):
    settings.EMAIL_BACKEND = "config.devmail.EmailBackend"
    settings.EMAIL_FILE_PATH = tmp_path
    for n in range(20):  # within one second, as a seeded demo's emails come
        mail.send_mail(f"Status {n}", "body", "no-reply@sluice.dev", [f"owner{n}@acme.test"])
    lines = capsys.readouterr().out.splitlines()
    files = {line.rsplit("(", 1)[1].rstrip(")") for line in lines}
    assert len(lines) == len(files) == len(list(tmp_path.iterdir())) == 20
    for n, line in enumerate(lines):
        path = Path(line.rsplit("(", 1)[1].rstrip(")"))
        assert path.read_text().count("Subject: ") == 1
        assert f"Subject: Status {n}" in path.read_text()
