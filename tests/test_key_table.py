"""The local key table end to end: exact per key until it is full, and what
a key finds when it is (`local_when_full`: share or evict), with its
counter, gauge and log line."""

from __future__ import annotations

import http.client
import os

from support import sluice_config, wait_until
from support.algorithms import ALGORITHMS
from support.load import run_load

QUOTA = 2
# `make flood` (SLUICE_FLOOD=1) floods ten times more fresh addresses.
FLOOD = 200_000 if os.environ.get("SLUICE_FLOOD") == "1" else 20_000


def table_config(max_keys: int, when_full: str = "share", quota: int = QUOTA,
                 algorithms: list[str] | None = None) -> dict:
    """One rule per client address with a limit of each algorithm (all
    decided together: a request passes only if every one admits it)."""
    limits = [{"algorithm": a, "requests": quota, "window": "1h"} for a in algorithms or ALGORITHMS]
    return sluice_config([{"name": "per-ip", "key": ["client_ip"], "limits": limits}],
                         client_ip={"xff_trusted_hops": 1}, local_max_keys=max_keys,
                         local_when_full=when_full, headers="none")


def send(conn: http.client.HTTPConnection, ip: str, n: int) -> list[int]:
    out = []
    for _ in range(n):
        conn.request("GET", "/", headers={"x-forwarded-for": ip})
        resp = conn.getresponse()
        resp.read()
        out.append(resp.status)
    return out


def client_ip(i: int) -> str:
    return f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"


def test_nine_hundred_clients_in_a_table_for_a_thousand_each_get_their_quota(envoy):
    # Every algorithm's table holds 900 live keys of its 1,000: each client,
    # one after another, gets exactly its quota and not one request more.
    e = envoy(table_config(1_000))
    conn = http.client.HTTPConnection("127.0.0.1", e.port, timeout=10)
    wrong = {}
    for i in range(900):
        got = send(conn, client_ip(i), QUOTA + 1)
        if got != [200] * QUOTA + [429]:
            wrong[i] = got
    # ... and still none more once the 900 are in.
    again = [i for i in range(0, 900, 9) if send(conn, client_ip(i), 1) != [429]]
    conn.close()
    assert not wrong, f"{len(wrong)} clients limited wrongly: {dict(list(wrong.items())[:5])}"
    assert not again
    assert e.sluice_stat("sluice.per-ip.table_full") == 0


def flood(e, keys: int) -> dict[int, int]:
    """`keys` fresh client addresses, one request each; the statuses."""
    report = run_load(f"http://127.0.0.1:{e.port}/", connections=8, requests=keys,
                      headers={"x-forwarded-for": "{ip}"}, distinct=keys, timeout=10)
    assert report.answered == report.sent == keys
    return {status: report.count(status) for status in report.status}


def table_full_seen(e) -> None:
    wait_until(lambda: e.sluice_stat("sluice.per-ip.table_full") > 0, what="table_full counted")
    wait_until(lambda: e.sluice_stat("sluice.per-ip.table_full_workers") >= 1,
               what="the table_full_workers gauge")
    wait_until(lambda: "its local key table is full" in e.log(), what="the table-full log line")


def test_a_client_with_its_own_entry_stays_exact_under_a_flood(envoy):
    # share: 20,000 fresh addresses (200,000 in `make flood`) into a table
    # for 1,000 keys fill it; the rest share overflow entries, never the
    # entry of a client that has one.
    e = envoy(table_config(1_000, quota=5, algorithms=["gcra"]))
    conn = http.client.HTTPConnection("127.0.0.1", e.port, timeout=10)
    legit = "203.0.113.7"
    assert send(conn, legit, 2) == [200, 200]
    statuses = flood(e, FLOOD)
    assert set(statuses) == {200, 429}
    assert send(conn, legit, 4) == [200, 200, 200, 429]
    conn.close()
    table_full_seen(e)


def test_evict_never_starves_a_new_key(envoy):
    # evict: every fresh address's first request is admitted, however full.
    e = envoy(table_config(1_000, when_full="evict", quota=1, algorithms=["fixed_window"]))
    assert flood(e, FLOOD) == {200: FLOOD}
    table_full_seen(e)


def test_two_workers_count_every_key_exactly_at_once(envoy):
    # 900 addresses in turn from 16 connections over 2 workers, ten rounds:
    # every key's entry is decided by both workers at once, and the table
    # admits exactly the quota of each, no more, no fewer.
    e = envoy(table_config(1_000, algorithms=["sliding_window"]), concurrency=2)
    keys, rounds = 900, 10
    report = run_load(f"http://127.0.0.1:{e.port}/", connections=16, requests=keys * rounds,
                      headers={"x-forwarded-for": "{ip}"}, distinct=keys, timeout=10)
    assert report.answered == report.sent == keys * rounds
    assert report.count(200) == keys * QUOTA, report.status
    assert e.sluice_stat("sluice.per-ip.table_full") == 0
    assert e.sluice_stat("sluice.cas_exhausted") == 0
