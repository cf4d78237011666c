"""Validation helpers shared by the parsers: every failure is an InventoryError with a position."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ringtrain.errors import InventoryError
from ringtrain.hostfile.model import Host, host_name_problem

NAME_HINT = "use a plain host name, FQDN or IP address (letters, digits, '.', '-', '_')"


@dataclass(frozen=True, slots=True)
class Where:
    """A position in a source, for error messages. Lines and columns count from 1."""

    source: str
    line: int | None = None
    column: int | None = None

    def error(self, message: str, hint: str) -> InventoryError:
        return InventoryError(message, hint, source=self.source, line=self.line, column=self.column)

    def at(self, line: int | None, column: int | None) -> Where:
        return Where(self.source, line, column)

    @property
    def text(self) -> str:
        if self.line is None:
            return self.source
        return f"line {self.line}" + (f", column {self.column}" if self.column else "")


def check_name(name: str, where: Where) -> str:
    problem = host_name_problem(name)
    if problem is not None:
        raise where.error(problem, NAME_HINT)
    return name


def parse_count(text: str, what: str, where: Where, *, zero_ok: bool = False) -> int:
    """A positive whole number written in text (slots, max_slots); 0 too when ``zero_ok``."""
    stripped = text.strip()
    if not stripped.isascii() or not stripped.isdigit() or len(stripped) > 9:
        raise where.error(
            f"{what} {text!r} is not a whole number",
            f"write a positive whole number, e.g. {what}=4",
        )
    if zero_ok and int(stripped) == 0:
        return 0
    return check_count(int(stripped), what, where)


def check_count(value: int, what: str, where: Where) -> int:
    if value <= 0:
        raise where.error(
            f"{what} must be at least 1, got {value}",
            "give every host one or more slots, or remove the host",
        )
    if value > 1_000_000:
        raise where.error(f"{what} {value} is implausibly large", f"write the real {what}")
    return value


def check_max_slots(slots: int, max_slots: int | None, where: Where) -> None:
    if max_slots is not None and max_slots < slots:
        raise where.error(
            f"max_slots={max_slots} is less than slots={slots}",
            "raise max_slots to at least slots, or drop max_slots",
        )


class UniqueHosts:
    """Collects hosts in order and refuses a second entry for the same name."""

    def __init__(self) -> None:
        self._hosts: list[Host] = []
        self._seen: dict[str, Where] = {}

    def add(self, host: Host, where: Where) -> None:
        first = self._seen.get(host.name)
        if first is not None:
            raise where.error(
                f"host {host.name!r} is listed twice (first at {first.text})",
                "list each host once and give it its total slot count",
            )
        self._seen[host.name] = where
        self._hosts.append(host)

    def extend(self, hosts: Iterable[Host], where: Where) -> None:
        for host in hosts:
            self.add(host, where)

    def result(self, where: Where, example: str) -> tuple[Host, ...]:
        if not self._hosts:
            raise where.error("no hosts found", f"add at least one host, e.g. {example}")
        return tuple(self._hosts)
