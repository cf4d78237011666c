"""Round-robin pairing (the circle method). Pure.

N hosts (one more, a bye, when N is odd) meet every other host exactly once in N-1 rounds of
N/2 disjoint pairs: the whole pair matrix costs N-1 short rounds, each pair measured while the
others in its round are measured too, not N(N-1)/2 rounds one pair at a time.
"""

from __future__ import annotations


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs (a < b) covering every pair of 0..n-1 once."""
    if n < 2:
        return []
    players: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(players)
    out: list[list[tuple[int, int]]] = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        out.append(sorted(pairs))
        players = [players[0], players[-1], *players[1:-1]]  # rotate all but the first
    return out
