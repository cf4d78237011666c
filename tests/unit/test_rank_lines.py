"""LineStream: a rank writes whole lines only; progress bars end as one line each."""

from __future__ import annotations

import io

from ringtrain.rank.lines import LineStream

# What Keras 2.15's Progbar writes for a 3-step epoch on a "dynamic" display (it takes any
# posix system for one): the bar, then backspaces over it, a carriage return and the next state.
BAR1 = "1/3 [=========>....................] - ETA: 0s - loss: 0.70"
BAR2 = "2/3 [===================>..........] - ETA: 0s - loss: 0.68"
DONE = "3/3 [==============================] - 1s 26ms/step - loss: 0.66 - accuracy: 0.62"


def _keras_epoch() -> list[str]:
    return ["Epoch 1/2\n", BAR1, "\b" * len(BAR1), "\r", BAR2, "\b" * len(BAR2), "\r", DONE,
            "\n"]


def test_a_keras_progress_bar_becomes_one_line_per_epoch() -> None:
    out = io.StringIO()
    stream = LineStream(out)  # type: ignore[arg-type]
    for chunk in _keras_epoch():
        stream.write(chunk)
        stream.flush()  # Keras flushes after every update
    assert out.getvalue() == f"Epoch 1/2\n{DONE}\n"


def test_a_message_printed_while_a_bar_is_up_gets_its_own_line() -> None:
    """Callbacks print (a checkpoint commit) before Keras draws the epoch's final bar state."""
    out = io.StringIO()
    stream = LineStream(out)  # type: ignore[arg-type]
    for chunk in _keras_epoch()[:-4]:  # up to the second state of the bar
        stream.write(chunk)
        stream.flush()
    print("checkpoint: committed epoch 1", file=stream, flush=True)  # type: ignore[arg-type]
    for chunk in ("\b" * len(BAR2), "\r", DONE, "\n"):
        stream.write(chunk)
    assert out.getvalue() == f"Epoch 1/2\n{BAR2}\ncheckpoint: committed epoch 1\n{DONE}\n"


def test_every_write_to_the_target_is_whole_lines() -> None:
    writes: list[str] = []

    class Spy(io.StringIO):
        def write(self, s: str) -> int:
            writes.append(s)
            return len(s)

    stream = LineStream(Spy())  # type: ignore[arg-type]
    for chunk in ["hel", "lo", "\n", "a\nb", "c\n", *_keras_epoch(), "tqdm 10%\r", "tqdm 100%\n"]:
        stream.write(chunk)
    assert all(w.endswith("\n") for w in writes)
    assert "".join(writes) == f"hello\na\nbc\nEpoch 1/2\n{DONE}\ntqdm 100%\n"


def test_a_long_redraw_is_shown_and_drain_ends_a_partial_line() -> None:
    out = io.StringIO()
    stream = LineStream(out, redraw_every_s=0.0)  # type: ignore[arg-type]
    stream.write("step 1\r")
    stream.write("step 2")
    assert out.getvalue() == "step 2\n"  # the bar's state, without waiting for its end
    stream.write("prompt without newline")
    assert out.getvalue() == "step 2\n"
    stream.drain()
    assert out.getvalue() == "step 2\nprompt without newline\n"
    assert stream.encoding == out.encoding  # everything else forwards to the real stream


def test_an_empty_write_adds_no_blank_line_at_exit() -> None:
    out = io.StringIO()
    stream = LineStream(out)
    stream.write("x\n")
    stream.write("")  # print("", end="") does this
    stream.drain()
    assert out.getvalue() == "x\n"
