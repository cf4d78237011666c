"""The end of a ``fit``: its epochs' tf.data iterator freed beside the script, not in it.

TensorFlow 2.15 frees that iterator as ``fit`` returns, and the free can wait out the
iterator's autotune period (60 s after a few minutes of training; ``ringtrain.rank.iterators``
says why). ``FreeAtTrainEnd`` hands it to a thread of its own at ``on_train_end``: the lines
after ``fit`` (an evaluation, a save) run at once, and the rank's exit does not wait for it.
"""

from __future__ import annotations

import sys
from typing import Any

import tensorflow as tf

from ringtrain.rank import iterators


class FreeAtTrainEnd(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Every rank: at ``on_train_end``, the iterator ``fit`` made is freed in a thread."""

    def __init__(self) -> None:
        super().__init__()
        self.freed = 0  # iterators handed aside, over this callback's fits

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        found = iterators.fit_iterators(sys._getframe(1), self.model)
        if iterators.free_beside(found) is not None:
            self.freed += len(found)
