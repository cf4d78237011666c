"""``hvd.init()``'s failure under Horovod's elastic driver is Horovod's internal error, the one
an elastic reset answers: with ringtrain's Horovod patch a peer lost while the ring forms again
fails init instead of the process (issue 38 item 3)."""

from __future__ import annotations

from types import ModuleType

import pytest
from horovod.common.exceptions import HorovodInternalError

from ringtrain.rank import hooks

FAILED = ValueError("Horovod initialization failed. Please check log messages above for a "
                    "more descriptive error.")


def test_under_the_elastic_driver_a_failed_init_is_an_internal_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOROVOD_ELASTIC", "1")
    turned = hooks.ring_not_formed(FAILED)
    assert isinstance(turned, HorovodInternalError)
    assert "could not be formed again" in str(turned)
    other = ValueError("Invalid type of argument comm")
    assert hooks.ring_not_formed(other) is other  # a user's mistake stays what it was


def test_outside_it_a_failed_init_stays_a_value_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    assert hooks.ring_not_formed(FAILED) is FAILED


def test_the_wrapped_init_raises_it_from_the_original(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOROVOD_ELASTIC", "1")

    class Basics:
        def init(self) -> None:
            raise FAILED

    module = ModuleType("horovod.common.basics")
    module.HorovodBasics = Basics  # type: ignore[attr-defined]
    began: list[bool] = []
    hooks.wrap_init(module, lambda _: None, lambda: began.append(True))
    with pytest.raises(HorovodInternalError) as raised:
        Basics().init()
    assert raised.value.__cause__ is FAILED and began == [True]


def _elastic_module() -> ModuleType:
    module = ModuleType("horovod.common.elastic")
    module.HorovodInternalError = HorovodInternalError  # type: ignore[attr-defined]
    module.run_fn = lambda func, reset: (lambda: (reset(), func())[1])  # type: ignore[attr-defined]
    return module


def test_hvd_elastic_runs_reset_again_when_the_ring_cannot_form(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Horovod's run_fn calls reset() outside its handler: a re-form's fault ended the
    worker. Wrapped, the reset is tried again, up to RESET_TRIES, then the error stands."""
    module = _elastic_module()
    hooks.wrap_elastic_run(module)
    tries: list[int] = []

    def flaky(fails: int):  # type: ignore[no-untyped-def]
        def reset() -> None:
            tries.append(1)
            if len(tries) <= fails:
                raise HorovodInternalError("the ring could not be formed again")
        return reset

    assert module.run_fn(lambda: "trained", flaky(2))() == "trained"
    assert len(tries) == 3
    assert "could not be formed again (try 2 of 5)" in capsys.readouterr().err
    tries.clear()
    with pytest.raises(HorovodInternalError):
        module.run_fn(lambda: "trained", flaky(hooks.RESET_TRIES))()
    assert len(tries) == hooks.RESET_TRIES
