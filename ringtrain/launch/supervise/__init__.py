"""Watching a running attempt: the checks that name a fault (``checks``), stragglers
(``straggler``), the teardown on every host (``teardown``), a parameter-server job's end
(``server_finisher``)."""
