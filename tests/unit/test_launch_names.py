"""probe/names.py: every name looked up once, in parallel, under one overall budget (issue 23:
a dry run of 500 names that do not resolve took 121 s, look-up after look-up)."""

from __future__ import annotations

import threading
import time
from collections import Counter

from ringtrain.hostfile import Host, Inventory
from ringtrain.probe import names
from ringtrain.probe.names import Resolver


class SlowDns:
    """Names ending in .slow hang like a dropped query (far past any budget); others answer."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.release = threading.Event()

    def __call__(self, name: str) -> tuple[str, ...]:
        with self.lock:
            self.asked[name] += 1
        if name.endswith(".slow"):
            self.release.wait(30)
            return ()
        time.sleep(0.001)
        return (f"10.9.{len(name) % 250}.1",)


def test_thousands_of_names_with_hanging_lookups_resolve_within_the_budget() -> None:
    dns = SlowDns()
    resolver = Resolver(dns)
    wanted = [f"node{i:05d}" + (".slow" if i % 10 == 0 else "") for i in range(10_000)]
    start = time.monotonic()
    found = resolver.resolve(wanted, budget_s=1.0)
    elapsed = time.monotonic() - start
    dns.release.set()
    assert elapsed < 1.5, elapsed  # the budget, not 1,000 hanging look-ups of 30 s
    assert found["node00001"] and found["node00010.slow"] == ()
    assert len(found) == 10_000


def test_names_that_answer_are_all_answered_within_the_budget() -> None:
    dns = SlowDns()
    resolver = Resolver(dns)
    wanted = [f"node{i:05d}" for i in range(3_000)] + [f"x{i}.slow" for i in range(50)]
    found = resolver.resolve(wanted, budget_s=1.5)
    dns.release.set()
    assert all(found[f"node{i:05d}"] for i in range(3_000))  # 64 at a time, 1 ms each


def test_each_name_is_looked_up_once_and_literals_never() -> None:
    dns = SlowDns()
    resolver = Resolver(dns)
    resolver.resolve(["a", "b", "192.0.2.1", "::1"])
    again = resolver.resolve(["a", "b", "a", "192.0.2.1"])
    assert dns.asked == Counter({"a": 1, "b": 1})
    assert again["192.0.2.1"] == ("192.0.2.1",) and again["a"]


def test_a_hanging_name_is_not_asked_again_while_it_hangs() -> None:
    dns = SlowDns()
    resolver = Resolver(dns)
    assert resolver.resolve(["x.slow"], budget_s=0.05) == {"x.slow": ()}
    assert resolver.resolve(["x.slow"], budget_s=0.05) == {"x.slow": ()}
    dns.release.set()
    assert dns.asked["x.slow"] == 1


def test_marking_this_machine_in_a_big_inventory_costs_one_budget(monkeypatch) -> None:
    dns = SlowDns()
    monkeypatch.setattr(names, "_RESOLVER", Resolver(dns))
    inv = Inventory(tuple(Host(f"gpu{i:04d}.slow", 1) for i in range(2_000)))
    from ringtrain.launch.job.hosts import mark_this_machine

    start = time.monotonic()
    out = mark_this_machine(inv)
    elapsed = time.monotonic() - start
    dns.release.set()
    assert elapsed < names.BUDGET_S + 1.0, elapsed
    assert not any(h.local for h in out.hosts)
