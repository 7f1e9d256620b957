"""The clients' lease bookkeeping (no I/O): what a heartbeat names, in calls of at most 1,000,
what a release carries, and what a refusal drops."""

import multiprocessing

from sluice_client import AuthorizeResult
from sluice_client.client import authorize_body
from sluice_client.leases import MAX_PER_CALL, Lease, LeaseBook, process_id


def lease(n: int) -> Lease:
    return Lease(f"rsv_{n}", ttl_ms=15_000, heartbeat_ms=5_000)


def test_a_heartbeat_names_every_lease_held_in_calls_of_at_most_1000():
    book = LeaseBook()
    for n in range(2_500):
        book.hold(lease(n))
    bodies = book.renewals("p1")
    assert [len(b["leases"]) for b in bodies] == [MAX_PER_CALL, MAX_PER_CALL, 500]
    assert {b["gateway_process"] for b in bodies} == {"p1"}
    named = [entry["id"] for b in bodies for entry in b["leases"]]
    assert len(set(named)) == 2_500
    assert LeaseBook().renewals("p1") == []  # nothing held: no call at all


def test_progress_only_grows_and_never_passes_the_reserved_output():
    book = LeaseBook()
    book.hold(lease(1), bound=100)
    book.hold(lease(2))  # no bound known
    book.progress("rsv_1", 40)
    book.progress("rsv_1", 30)   # behind what was sent: kept at 40
    book.progress("rsv_2", 5_000)
    book.progress("rsv_9", 7)    # not held: ignored
    assert book.held_progress("rsv_1") == 40
    book.progress("rsv_1", 150)
    sent = {e["id"]: e["delivered_output_tokens"] for e in book.renewals("p")[0]["leases"]}
    assert sent == {"rsv_1": 100, "rsv_2": 5_000}


def test_a_release_stops_the_renewal_and_leaves_once():
    book = LeaseBook()
    book.hold(lease(1))
    book.hold(lease(2))
    book.progress("rsv_1", 12)
    assert book.release("rsv_1", 20) and not book.release("rsv_1", 25)
    assert book.release("rsv_2") and book.releasing
    assert book.renewals("p") == []
    assert book.releases_take("p") == [{"gateway_process": "p", "leases": [
        {"id": "rsv_1", "delivered_output_tokens": 20},
        {"id": "rsv_2", "delivered_output_tokens": 0}]}]
    assert not book.releasing and book.releases_take("p") == []


def test_a_refused_lease_is_dropped_counted_and_reported():
    refused = []
    book = LeaseBook(on_refused=lambda kind, lid, code: refused.append((kind, lid, code)))
    for n in range(3):
        book.hold(lease(n))
    book.answered({"leases": [
        {"id": "rsv_0", "status": "renewed", "ttl_ms": 15_000},
        {"id": "rsv_1", "status": "refused", "code": "lease_expired", "message": "..."},
        {"id": "rsv_2", "status": "refused", "code": "lease_not_yours", "message": "..."}]},
        kind="heartbeat")
    assert [e["id"] for e in book.renewals("p")[0]["leases"]] == ["rsv_0"]
    assert refused == [("heartbeat", "rsv_1", "lease_expired"),
                       ("heartbeat", "rsv_2", "lease_not_yours")]
    assert book.stats["renewed"] == 1 and book.stats["heartbeat_refused"] == 2
    book.answered({"unexpected": True}, kind="heartbeat")  # logged, nothing dropped
    assert len(book) == 1


def test_authorize_asks_for_a_lease_only_when_told_and_never_on_a_dry_run():
    common = {"request_id": "r1", "api_key": "k", "model": "m", "input_tokens": 1,
              "max_output_tokens": None, "region": None, "service_tier": None}
    plain = authorize_body(**common, dry_run=False)
    assert "lease" not in plain and "gateway_process" not in plain
    leased = authorize_body(**common, dry_run=False, lease=True)
    assert leased["lease"] is True and leased["gateway_process"] == process_id()
    assert "lease" not in authorize_body(**common, dry_run=True, lease=True)


def test_an_answer_without_a_lease_reads_as_before():
    class Answer:
        status_code = 200

        @staticmethod
        def json():
            return {"allowed": True, "reservation_id": "rsv_1"}

    assert AuthorizeResult.from_response(Answer()).lease is None


def _child_process_id(out) -> None:
    out.put(process_id())


def test_the_process_id_is_one_per_process_and_new_in_a_child():
    assert process_id() == process_id()
    assert 1 <= len(process_id()) <= 64
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_process_id, args=(out,))
    child.start()
    theirs = out.get(timeout=30)
    child.join()
    assert theirs != process_id()


def test_a_key_near_its_concurrency_limit_waits_for_pending_releases():
    book = LeaseBook()

    def answer(remaining=None, code=None):
        headers = {} if remaining is None else {"x-ratelimit-remaining-requests": str(remaining)}
        return AuthorizeResult(allowed=code is None, status_code=200 if code is None else 429,
                               headers=headers, error_code=code)

    assert not book.near_limit("sk_a")  # nothing known: ask at once (a refusal asks again)
    book.answered_authorize("sk_a", answer(40))
    assert not book.near_limit("sk_a")
    book.answered_authorize("sk_a", answer(2))
    assert book.near_limit("sk_a") and not book.near_limit("sk_b")
    book.answered_authorize("sk_b", answer(code="concurrency_exceeded"))
    assert book.near_limit("sk_b")
    book.answered_authorize("sk_b", answer())  # no header (an older Sluice): unchanged
    assert book.near_limit("sk_b")
