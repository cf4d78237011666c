"""The rank agent's TensorFlow hook: a task waiting for its cluster in
``Context.ensure_initialized`` (TensorFlow holds the GIL there, so heartbeats stop) says so
before and after; a plain context, or one already initialised, says nothing."""

from __future__ import annotations

import types
from typing import Any

import pytest

from ringtrain.rank.agent import _wrap_tf_context


def _module(**attrs: Any) -> tuple[types.ModuleType, list[str]]:
    calls: list[str] = []

    class Context:
        def __init__(self) -> None:
            self._initialized = False
            self._collective_ops_server_def = None
            self._server_def = None
            self._context_handle: object = None
            self.__dict__.update(attrs)

        def ensure_initialized(self) -> None:
            calls.append("initialize")
            if self._collective_ops_server_def == "unreachable":
                raise RuntimeError("peer gone")
            self._initialized = True
            self._context_handle = object()

        def set_server_def(self, server_def: str) -> None:
            self._server_def = server_def
            calls.append("set_server_def")

    module = types.ModuleType("fake_context")
    module.Context = Context  # type: ignore[attr-defined]
    return module, calls


def test_a_cluster_context_is_announced_before_and_after_it_forms() -> None:
    module, calls = _module(_collective_ops_server_def="server def")
    sent: list[str] = []
    _wrap_tf_context(module, sent.append)
    ctx = module.Context()
    ctx.ensure_initialized()
    ctx.ensure_initialized()  # initialised: nothing more to say
    assert sent == ["tf_forming", "tf_formed"] and calls == ["initialize", "initialize"]


def test_the_parameter_server_coordinators_server_def_is_announced_too() -> None:
    module, _ = _module(_server_def="server def")
    sent: list[str] = []
    _wrap_tf_context(module, sent.append)
    module.Context().ensure_initialized()
    assert sent == ["tf_forming", "tf_formed"]


def test_a_local_context_says_nothing_and_a_failure_still_ends_the_wait() -> None:
    module, _ = _module()
    sent: list[str] = []
    _wrap_tf_context(module, sent.append)
    module.Context().ensure_initialized()
    assert sent == []
    failing, _ = _module(_collective_ops_server_def="unreachable")
    _wrap_tf_context(failing, sent.append)
    with pytest.raises(RuntimeError, match="peer gone"):
        failing.Context().ensure_initialized()
    assert sent == ["tf_forming", "tf_formed"]


def test_a_server_def_set_on_a_running_context_is_announced() -> None:
    """The coordinator's context already runs (tensors made before the strategy): TensorFlow
    then waits for the cluster inside set_server_def itself."""
    module, calls = _module()
    sent: list[str] = []
    _wrap_tf_context(module, sent.append)
    ctx = module.Context()
    ctx.set_server_def("early")  # no context yet: it only records the def
    assert sent == []
    ctx.ensure_initialized()  # the recorded def is joined here
    assert sent == ["tf_forming", "tf_formed"]
    ctx.set_server_def("again")  # on a running context: joined at once
    assert sent == ["tf_forming", "tf_formed"] * 2
    assert calls == ["set_server_def", "initialize", "set_server_def"]
