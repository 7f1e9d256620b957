"""Reservation ids (quotas/hook/reservations.py), signed for pool, org, key and request."""

import hashlib
import hmac
import threading

from django.conf import settings

from quotas.hook.reservations import ReservationRef, reservation_id_issue, reservation_id_parse


def _expected(pool_id: int, org_id: int, api_key_id: int | None, request_id: str) -> str:
    """The id as the one-shot HMAC of RFC 2104 gives it: what ids issued before the signer was
    keyed once carry, and still verify."""
    key = hashlib.sha256(b"sluice.reservation:" + settings.SECRET_KEY.encode()).digest()
    key_part = "" if api_key_id is None else str(api_key_id)
    message = f"{pool_id}.{org_id}.{key_part}.{request_id}".encode()
    return f"rsv_{pool_id}_{org_id}_{key_part}_" + hmac.digest(key, message, "sha256").hex()[:20]


def test_an_id_verifies_for_its_request_and_nothing_else():
    rid = reservation_id_issue(pool_id=7, org_id=3, api_key_id=11, request_id="req-1")
    assert rid == _expected(7, 3, 11, "req-1")
    assert reservation_id_parse(rid, request_id="req-1") == ReservationRef(7, 3, 11)
    assert reservation_id_parse(rid, request_id="req-2") is None
    for edited in (rid.replace("rsv_7_3_", "rsv_8_3_"), rid.replace("_3_11_", "_4_11_"),
                   rid.replace("_11_", "_12_"), rid[:-1] + ("0" if rid[-1] != "0" else "1")):
        assert reservation_id_parse(edited, request_id="req-1") is None


def test_a_keyless_id_and_ids_issued_by_the_one_shot_hmac_verify():
    keyless = reservation_id_issue(pool_id=2, org_id=5, api_key_id=None, request_id="r")
    assert keyless == _expected(2, 5, None, "r")
    assert reservation_id_parse(keyless, request_id="r") == ReservationRef(2, 5, None)
    issued_before = _expected(9, 1, 4, "old")
    assert reservation_id_parse(issued_before, request_id="old") == ReservationRef(9, 1, 4)


def test_threads_signing_at_once_each_get_their_own_signature():
    """Every signature copies one keyed HMAC: threads copying it at once must not mix their
    messages."""
    count, threads = 2_000, 8
    barrier = threading.Barrier(threads)
    wrong: list[tuple[int, str]] = []

    def sign(thread: int) -> None:
        barrier.wait()
        for n in range(count):
            request_id = f"t{thread}-{n}"
            rid = reservation_id_issue(pool_id=thread + 1, org_id=n % 7, api_key_id=n,
                                       request_id=request_id)
            if rid != _expected(thread + 1, n % 7, n, request_id):
                wrong.append((thread, request_id))

    workers = [threading.Thread(target=sign, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert wrong == []
