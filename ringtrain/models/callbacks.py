"""Keras callbacks that talk to the ringtrain launcher."""

from __future__ import annotations

import time
from typing import Any

import tensorflow as tf

from ringtrain.rank import progress


class ProgressCallback(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Report epoch, step, loss and throughput to the launcher at most every ``every_s``.

    Add it on every rank or only rank 0; the launcher keeps the newest report. ``batch_size`` is
    the per-rank batch, ``world_size`` the number of ranks (global samples/s = both multiplied).
    """

    def __init__(self, batch_size: int, world_size: int = 1, every_s: float = 1.0) -> None:
        super().__init__()
        self.samples_per_step = batch_size * world_size
        self.every_s = every_s
        self._epoch = 0
        self._last = 0.0
        self._window_start = 0.0
        self._window_steps = 0
        self._global_step = 0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch
        self._window_start = time.monotonic()
        self._window_steps = 0

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._global_step += 1
        self._window_steps += 1
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._send(batch + 1, logs, now)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._send(self.params.get("steps"), logs, time.monotonic(), epoch_done=True)

    def _send(
        self, step: int | None, logs: dict[str, Any] | None, now: float, epoch_done: bool = False
    ) -> None:
        elapsed = max(now - self._window_start, 1e-9)
        rate = self._window_steps * self.samples_per_step / elapsed
        loss = (logs or {}).get("loss")
        progress.report(
            epoch=self._epoch + (1 if epoch_done else 0),
            step=step,
            loss=None if loss is None else float(loss),
            samples_per_s=rate,
            epochs=self.params.get("epochs"),
            steps=self.params.get("steps"),
        )
        self._last = now
