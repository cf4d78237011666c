"""launch/elastic/spares.py: the discovery list under --elastic (active, spares, resting). Pure."""

from __future__ import annotations

import pytest

from ringtrain.errors import UsageError
from ringtrain.hostfile import Host
from ringtrain.launch.elastic import spares

HOSTS = (Host("gpu01", 2), Host("gpu02", 2), Host("gpu03", 2))


def passing(hosts: tuple[str, ...]) -> dict[str, str | None]:
    """A keeper's check: every host answers and its GPUs are free."""
    return dict.fromkeys(hosts)


def failing(hosts: tuple[str, ...]) -> dict[str, str | None]:
    return dict.fromkeys(hosts, "no answer")


def test_the_last_hosts_or_the_labelled_ones_are_spares() -> None:
    active, held = spares.split(HOSTS, 1)
    assert [h.name for h in active] == ["gpu01", "gpu02"] and [h.name for h in held] == ["gpu03"]
    labelled = (Host("a", 1, labels=(("spare", "true"),)), Host("b", 1), Host("c", 1))
    active, held = spares.split(labelled, 0)
    assert [h.name for h in held] == ["a"] and [h.name for h in active] == ["b", "c"]
    assert spares.split(HOSTS, 0) == (HOSTS, ())
    with pytest.raises(UsageError, match=r"all 3 host\(s\) would be spares"):
        spares.split(HOSTS, 3)


def test_a_lost_host_rests_and_the_first_spare_takes_its_place() -> None:
    pool = spares.pool_of(HOSTS[:2], HOSTS[2:])
    assert pool.text() == "gpu01:2\ngpu02:2\n" and pool.target == 4
    pool, said = spares.lose(pool, "gpu02", 100.0, (60, 240))
    assert pool.text() == "gpu01:2\ngpu03:2\n" and pool.spares == ()
    assert said == "elastic: gpu03 (a spare) takes gpu02's place; gpu02 sits out 60 s (failure 1)"
    assert spares.lose(pool, "gpu02", 101.0, (60, 240)) == (pool, None)  # already out
    pool, said = spares.lose(pool, "gpu03", 110.0, (60, 240))
    assert pool.text() == "gpu01:2\n"
    assert said == "elastic: no spare left: the job goes on without gpu03; gpu03 sits out 60 s " \
        "(failure 1)"
    assert spares.due(pool, 159.0) == () and spares.due(pool, 160.0) == ("gpu02",)


def test_a_rested_host_comes_back_as_needed_or_as_a_spare_and_cooldowns_double() -> None:
    pool = spares.pool_of(HOSTS[:2], HOSTS[2:])
    pool, _ = spares.lose(pool, "gpu02", 0.0, (60, 240))  # gpu03 in: full again
    pool, said = spares.readmit(pool, "gpu02", True, 60.0, (60, 240))
    assert said == "elastic: gpu02 passed its check; it is a spare again"
    assert pool.spares == (("gpu02", 2),) and pool.text() == "gpu01:2\ngpu03:2\n"
    pool, _ = spares.lose(pool, "gpu03", 70.0, (60, 240))  # gpu02 in
    pool, said = spares.lose(pool, "gpu02", 80.0, (60, 240))  # second failure: 120 s
    assert said.endswith("gpu02 sits out 120 s (failure 2)") and pool.text() == "gpu01:2\n"
    pool, said = spares.readmit(pool, "gpu03", False, 130.0, (60, 240), "no route to host")
    assert said == "elastic: gpu03 failed its check (no route to host); it sits out 120 s more"
    pool, said = spares.readmit(pool, "gpu02", True, 200.0, (60, 240))
    assert said.startswith("elastic: gpu02 passed its check and joins again (the job is short")
    assert pool.text() == "gpu01:2\ngpu02:2\n"
    assert [spares.cooldown(n, 60, 240) for n in (1, 2, 3, 4)] == [60, 120, 240, 240]


def test_the_keeper_keeps_warm_processes_on_whatever_hosts_are_spares_now() -> None:
    """Warm processes: on the spares at the start, and on a host back from its cooldown as a
    spare; a spare that took a lost host's place needs none (its rank is running)."""
    from ringtrain.launch.elastic.sparekeeper import SpareKeeper

    told: list[tuple[tuple[str, int], ...]] = []
    clock = [100.0]
    keeper = SpareKeeper(spares.pool_of(HOSTS[:2], HOSTS[2:]), (60, 240), lambda _: None,
                         passing, lambda _: None, lambda: clock[0], warm=told.append,
                         hosts=HOSTS)
    assert told == [(("gpu03", 2),)]
    keeper.lost("gpu02")  # gpu03 takes its place
    clock[0] = 200.0
    keeper.tick()  # gpu02's cooldown is over: checked (in a thread) and back as a spare
    assert keeper._checking is not None
    keeper._checking.join(timeout=10)
    assert told[-1] == (("gpu02", 2),) and keeper.pool.text() == "gpu01:2\ngpu03:2\n"


def test_warm_processes_carry_the_run_id_for_the_reaper() -> None:
    from ringtrain.launch.elastic.warmspares import warm_argv
    from ringtrain.rank import envvars

    argv = warm_argv("/opt/py/bin/python", "r1", 3)
    assert argv[:4] == ("sh", "-c", 'cd / && exec "$@"', "ringtrain-warm")  # from /, issue 40
    assert argv[4:8] == ("env", f"{envvars.RUN_ID}=r1", "/opt/py/bin/python", "-m")
    assert argv[8:12] == ("ringtrain.rank.warm", "r1", "--slot", "3")


def test_a_spare_is_offered_once_the_survivors_train_again_or_after_the_delay() -> None:
    """Held back, the survivors form their new ring alone and the spare joins at the next
    commit; offered anyway after SPARE_DELAY_S when they have not trained again by then. The
    lost host's removal waits for the same moment: Horovod has blacklisted it by then, so it
    is no second "hosts updated" reset (issue 38 item 2)."""
    from ringtrain.launch.elastic.sparekeeper import REMOVAL_HOLD_S, SPARE_DELAY_S, SpareKeeper

    published: list[str] = []
    said: list[str] = []
    clock = [100.0]
    keeper = SpareKeeper(spares.pool_of(HOSTS[:2], HOSTS[2:]), (60, 240), published.append,
                         passing, said.append, lambda: clock[0])
    keeper.lost("gpu02")
    assert published == []  # gpu02's removal and gpu03 (the spare) held back for now
    keeper.release()  # the survivors report progress again
    assert published == ["gpu01:2\ngpu03:2\n"]
    assert said[-1] == "elastic: gpu03 offered to Horovod's driver: joins at the next commit"
    keeper.lost("gpu01")  # no spare left: only the removal, held
    assert len(published) == 1
    clock[0] += REMOVAL_HOLD_S - 1
    keeper.tick()
    assert len(published) == 1
    clock[0] += 1  # nobody trained again in time: published anyway
    keeper.tick()
    assert published[-1] == "gpu03:2\n"
    keeper.release()  # nothing held any more: nothing published again
    assert len(published) == 2
    other = SpareKeeper(spares.pool_of(HOSTS[:2], HOSTS[2:]), (60, 240), published.append,
                        passing, said.append, lambda: clock[0])
    other.lost("gpu01")
    clock[0] += SPARE_DELAY_S  # nobody trained again in time: offered anyway
    other.tick()
    assert published[-1] == "gpu02:2\ngpu03:2\n"


def test_a_warm_spare_is_offered_at_once_to_join_the_round_that_forms_now() -> None:
    """Warm spares: the loss goes out at once, the lost host out and the spare in its place
    (Horovod's driver, ringtrain's hvd_driver, waits for this list as the round forms: one
    round per fault, issue 38 item 2), and the spares left are said (their count is what the
    driver reads). A loss with no spare left is held, as without spares."""
    from ringtrain.launch.elastic.sparekeeper import SpareKeeper

    published: list[str] = []
    said: list[str] = []
    told: list[tuple[tuple[str, int], ...]] = []
    keeper = SpareKeeper(spares.pool_of(HOSTS[:2], HOSTS[2:]), (60, 240), published.append,
                         passing, said.append, lambda: 100.0, warm=told.append)
    assert told == [(("gpu03", 2),)]
    keeper.lost("gpu02")
    assert published == ["gpu01:2\ngpu03:2\n"] and told[-1] == ()
    assert said[-1] == ("elastic: gpu03 offered to Horovod's driver now: its warm process "
                        "joins the ring the survivors form again")
    keeper.release()  # the survivors train again: nothing is held
    assert len(published) == 1
    keeper.lost("gpu03")  # no spare left: the removal is held as without spares
    assert len(published) == 1
    keeper.release()
    assert published[-1] == "gpu01:2\n"


def test_a_short_cooldown_holds_the_removal_for_half_of_it() -> None:
    """Horovod re-admits a blacklisted host after its cooldown: the removal must reach it
    before then."""
    from ringtrain.launch.elastic.sparekeeper import SpareKeeper

    published: list[str] = []
    clock = [0.0]
    keeper = SpareKeeper(spares.pool_of(HOSTS, ()), (2, 4), published.append,
                         passing, lambda _: None, lambda: clock[0])
    keeper.lost("gpu03")
    clock[0] = 0.9
    keeper.tick()
    assert published == []
    clock[0] = 1.0
    keeper.tick()
    assert published == ["gpu01:2\ngpu02:2\n"]


@pytest.mark.parametrize("ready", [6.5, None])
def test_a_rested_host_is_offered_once_its_warm_processes_wait(ready: float | None) -> None:
    """A host back from its cooldown that passes its check gets warm processes (rejoin), and
    only then goes into the list: the survivors reset for it at their next commit, and their
    ring waits for a hand-over, not for its imports. Not ready in time: offered anyway."""
    from ringtrain.launch.elastic.sparekeeper import SpareKeeper

    published: list[str] = []
    said: list[str] = []
    order: list[str] = []
    clock = [100.0]

    def rejoin(name: str, slots: int) -> float | None:
        order.append(f"rejoin {name} {slots} (published {len(published)})")
        return ready

    keeper = SpareKeeper(spares.pool_of(HOSTS, ()), (60, 240), published.append,
                         passing, said.append, lambda: clock[0], rejoin=rejoin)
    keeper.lost("gpu03")
    keeper.release()  # the survivors train again: the removal goes out
    assert published == ["gpu01:2\ngpu02:2\n"]
    clock[0] = 200.0
    keeper.tick()
    assert keeper._checking is not None
    keeper._checking.join(timeout=10)
    assert order == ["rejoin gpu03 2 (published 1)"]  # warm first, then offered
    assert published[-1] == "gpu01:2\ngpu02:2\ngpu03:2\n"
    assert said[-2] == ("elastic: gpu03's warm processes ready after 6.5 s" if ready else
                        "elastic: gpu03's warm processes not ready: its ranks start cold")
    assert said[-1].startswith("elastic: gpu03 passed its check and joins again")


def test_a_host_that_fails_its_check_gets_no_warm_processes() -> None:
    from ringtrain.launch.elastic.sparekeeper import SpareKeeper

    called: list[str] = []
    clock = [100.0]
    keeper = SpareKeeper(spares.pool_of(HOSTS, ()), (60, 240), lambda _: None,
                         failing, lambda _: None, lambda: clock[0],
                         rejoin=lambda name, _: called.append(name) or 1.0)
    keeper.lost("gpu03")
    clock[0] = 200.0
    keeper.tick()
    assert keeper._checking is not None
    keeper._checking.join(timeout=10)
    assert called == [] and [r.name for r in keeper.pool.resting] == ["gpu03"]


def test_a_rested_host_that_comes_back_as_a_spare_is_not_waited_for() -> None:
    """The job is not short (a spare took the lost host's place): the rested host is a spare
    again at once, warm processes kept by the spares' own rule; nothing waits in its check."""
    from ringtrain.launch.elastic.sparekeeper import SpareKeeper

    called: list[str] = []
    told: list[tuple[tuple[str, int], ...]] = []
    clock = [100.0]
    keeper = SpareKeeper(spares.pool_of(HOSTS[:2], HOSTS[2:]), (60, 240), lambda _: None,
                         passing, lambda _: None, lambda: clock[0], warm=told.append,
                         rejoin=lambda name, _: called.append(name) or 1.0)
    keeper.lost("gpu02")  # gpu03 takes its place
    clock[0] = 200.0
    keeper.tick()
    assert keeper._checking is not None
    keeper._checking.join(timeout=10)
    assert called == [] and told[-1] == (("gpu02", 2),)


def test_the_rejoin_waits_for_the_runs_warm_slots_on_that_host() -> None:
    from ringtrain.launch.elastic.warmspares import await_argv
    from ringtrain.rank import envvars

    argv = await_argv("/opt/py/bin/python", "r1", 2, 60)
    assert argv[4:8] == ("env", f"{envvars.RUN_ID}=r1", "/opt/py/bin/python", "-m")
    assert argv[8:] == ("ringtrain.rank.warm", "r1", "--await-slots", "2", "--timeout", "60")


def test_of_hosts_passing_together_those_the_job_is_short_of_join_the_rest_are_spares() -> None:
    pool = spares.pool_of(HOSTS, ())
    for name in ("gpu01", "gpu02", "gpu03"):
        pool, _ = spares.lose(pool, name, 0.0, (60, 240))
    assert spares.joining(pool, ("gpu02", "gpu03")) == ("gpu02", "gpu03")
    pool, _ = spares.readmit(pool, "gpu01", True, 60.0, (60, 240))
    pool, _ = spares.readmit(pool, "gpu02", True, 60.0, (60, 240))
    assert spares.joining(pool, ("gpu03",)) == ("gpu03",)
    pool, _ = spares.readmit(pool, "gpu03", True, 60.0, (60, 240))
    assert spares.joining(pool, ()) == ()
    # short by one host: the first to pass joins, the second comes back as a spare
    short_one = spares.pool_of(HOSTS[:2], HOSTS[2:])
    short_one, _ = spares.lose(short_one, "gpu01", 0.0, (60, 240))  # gpu03 in
    short_one, _ = spares.lose(short_one, "gpu02", 0.0, (60, 240))
    assert spares.joining(short_one, ("gpu02", "gpu01")) == ("gpu02",)
    for name in ("gpu02", "gpu01"):
        short_one, _ = spares.readmit(short_one, name, True, 60.0, (60, 240))
    assert short_one.text() == "gpu03:2\ngpu02:2\n" and short_one.spares == (("gpu01", 2),)


def test_hosts_rested_together_are_checked_together_and_come_back_in_one_list() -> None:
    """A rack lost at once: its hosts' cooldowns end at the same tick; one probe checks them
    all, their warm processes are awaited side by side, and the list goes out once, so the
    survivors re-form once for all of them, not once a host (each re-form stalls the job). A
    host that fails its check sits out again, said with why."""
    import threading

    from ringtrain.launch.elastic.sparekeeper import SpareKeeper

    hosts = tuple(Host(f"gpu{i:02d}", 1) for i in range(1, 7))
    published: list[str] = []
    said: list[str] = []
    checked: list[tuple[str, ...]] = []
    warming: list[int] = []
    at_once = [0]
    lock = threading.Lock()
    clock = [100.0]

    def check(names: tuple[str, ...]) -> dict[str, str | None]:
        checked.append(names)
        return {n: "GPU 0: Xid 79" if n == "gpu05" else None for n in names}

    together = threading.Barrier(3, timeout=10)  # broken unless all three wait at once

    def rejoin(name: str, slots: int) -> float:
        with lock:
            warming.append(slots)
            at_once[0] = max(at_once[0], len(warming))
        together.wait()
        with lock:
            warming.pop()
        return 4.5

    keeper = SpareKeeper(spares.pool_of(hosts, ()), (60, 240), published.append, check,
                         said.append, lambda: clock[0], rejoin=rejoin)
    for name in ("gpu03", "gpu04", "gpu05", "gpu06"):
        keeper.lost(name)
    keeper.release()
    assert published == ["gpu01:1\ngpu02:1\n"]
    clock[0] = 200.0
    keeper.tick()
    assert keeper._checking is not None
    keeper._checking.join(timeout=10)
    assert checked == [("gpu03", "gpu04", "gpu05", "gpu06")]
    assert at_once[0] == 3  # gpu03, gpu04 and gpu06 warmed side by side
    assert published[1:] == ["gpu01:1\ngpu02:1\ngpu03:1\ngpu04:1\ngpu06:1\n"]
    assert said.count("elastic: gpu03's warm processes ready after 4.5 s") == 1
    assert "elastic: gpu05 failed its check (GPU 0: Xid 79); it sits out 120 s more" in said
    assert [r.name for r in keeper.pool.resting] == ["gpu05"]
