"""The rank agent's TensorFlow hook: a task joining its cluster (the bindings' calls where
TensorFlow waits for every other task, holding the GIL, so heartbeats stop) says so before and
after; every other call, and a failing join, are left as they were."""

from __future__ import annotations

import importlib.util
import re
import types
from pathlib import Path

import pytest

from ringtrain.rank.hooks import TF_JOIN_CALLS, wrap_tf_join


def _bindings(calls: list[str]) -> types.ModuleType:
    module = types.ModuleType("fake_pywrap_tfe")

    def join(handle: object, server_def: bytes) -> str:
        calls.append(f"join {server_def.decode()}")
        if server_def == b"unreachable":
            raise RuntimeError("peer gone")
        return "joined"

    for name in TF_JOIN_CALLS:
        setattr(module, name, join)
    module.TFE_Py_Execute = lambda *a: calls.append("execute")  # type: ignore[attr-defined]
    return module


def test_a_join_is_announced_before_and_after_it_returns() -> None:
    calls: list[str] = []
    module = _bindings(calls)
    sent: list[str] = []

    def tell(kind: str) -> None:
        sent.append(kind)
        calls.append(kind)

    wrap_tf_join(module, tell)
    assert module.TFE_EnableCollectiveOps(None, b"collective") == "joined"
    assert calls == ["tf_forming", "join collective", "tf_formed"]
    module.TFE_ContextSetServerDef(None, b"ps")  # the parameter-server coordinator
    assert sent == ["tf_forming", "tf_formed"] * 2


def test_other_calls_say_nothing_and_a_failed_join_still_ends_the_wait() -> None:
    calls: list[str] = []
    module = _bindings(calls)
    sent: list[str] = []
    wrap_tf_join(module, sent.append)
    module.TFE_Py_Execute()  # the hot path is not wrapped
    assert sent == [] and calls == ["execute"]
    with pytest.raises(RuntimeError, match="peer gone"):
        module.TFE_EnableCollectiveOps(None, b"unreachable")
    assert sent == ["tf_forming", "tf_formed"]


def test_the_wrapped_calls_are_the_ones_tensorflows_context_makes() -> None:
    """TensorFlow's eager context reaches each join call through the bindings module at call
    time (``pywrap_tfe.NAME(``), which is what makes wrapping the module's attribute work."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("TensorFlow is not installed")
    source = (Path(next(iter(spec.submodule_search_locations))) / "python" / "eager"
              / "context.py").read_text()
    made = set(re.findall(r"pywrap_tfe\.(TFE_\w+)\(", source))
    assert {"TFE_EnableCollectiveOps", "TFE_ContextSetServerDefWithTimeoutAndRetries",
            "TFE_ContextSetServerDef", "TFE_ContextUpdateServerDef"} <= made
    assert set(TF_JOIN_CALLS) <= made
