"""kudu-python's ``kudu.util``: conversions between Python values and Kudu's physical forms (microseconds
since the epoch, hybrid times, unscaled decimals, days since the epoch), for code that prepares values
itself or reads raw ones."""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
from typing import Any

from kudu_async.common.clock import physical_micros
from kudu_async.common.errors import KuduInvalidArgument
from kudu_async.common.types import (
    ISO_TIMESTAMP_FORMAT,
    date_to_days,
    datetime_to_micros,
    days_to_date,
    micros_to_datetime,
    parse_timestamp,
)

__all__ = [
    "date_to_unix_epoch_days",
    "from_hybridtime",
    "from_unixtime_micros",
    "from_unscaled_decimal",
    "get_decimal_scale",
    "indent",
    "to_unixtime_micros",
    "to_unscaled_decimal",
    "unix_epoch_days_to_date",
]


def indent(text: str, spaces: int) -> str:
    """``text`` with every line shifted right by ``spaces`` blanks (for nested reprs)."""
    pad = " " * spaces
    return "\n".join(pad + line for line in text.split("\n"))


def to_unixtime_micros(timestamp: Any, format: str = ISO_TIMESTAMP_FORMAT) -> int:
    """Microseconds since the epoch of a datetime (naive means UTC, an aware one is converted), a string in
    ``format``, or a ``(string, format)`` tuple. ValueError for anything else, as kudu-python raises."""
    if isinstance(timestamp, str | tuple):
        try:
            timestamp = parse_timestamp(timestamp, format)
        except KuduInvalidArgument as e:  # kudu-python lets strptime's ValueError through: keep that type
            raise ValueError(str(e)) from e
    if not isinstance(timestamp, _dt.datetime):
        raise ValueError(
            f"a timestamp is a datetime.datetime, a string or a (string, format) tuple, not {type(timestamp).__name__}"
        )
    return datetime_to_micros(timestamp)


def from_unixtime_micros(unixtime_micros: int) -> _dt.datetime:
    """The UTC datetime of microseconds since the epoch."""
    if isinstance(unixtime_micros, bool) or not isinstance(unixtime_micros, int):
        raise ValueError(f"unixtime_micros is an int, not {type(unixtime_micros).__name__}")
    return micros_to_datetime(unixtime_micros)


def from_hybridtime(hybridtime: int) -> _dt.datetime:
    """The UTC datetime of a hybrid time, one microsecond past its physical part: a snapshot at it sees
    every write the hybrid time covers."""
    return from_unixtime_micros(physical_micros(int(hybridtime)) + 1)


def get_decimal_scale(decimal: _decimal.Decimal) -> int:
    """The number of digits after the point (0 for integral values, also those written with an exponent)."""
    exponent = decimal.as_tuple().exponent
    if not isinstance(exponent, int):
        raise ValueError(f"{decimal} has no scale")
    return max(0, -exponent)


def to_unscaled_decimal(decimal: _decimal.Decimal, context: _decimal.Context | None = None) -> int:
    """The decimal's digits as an integer at its own scale: ``Decimal('1.23')`` gives 123."""
    ctx = context if context is not None else _decimal.getcontext()
    return int(decimal.scaleb(get_decimal_scale(decimal), ctx).to_integral_exact(context=ctx))


def from_unscaled_decimal(
    unscaled_decimal: int, scale: int, context: _decimal.Context | None = None
) -> _decimal.Decimal:
    """The Decimal of an unscaled integer at ``scale``: ``(123, 2)`` gives ``Decimal('1.23')``."""
    ctx = context if context is not None else _decimal.getcontext()
    return _decimal.Decimal(unscaled_decimal, ctx).scaleb(-scale, ctx)


def unix_epoch_days_to_date(ndays: int) -> _dt.date:
    """The calendar date ``ndays`` days after 1970-01-01."""
    return days_to_date(ndays)


def date_to_unix_epoch_days(date: _dt.date) -> int:
    """Days from 1970-01-01 to ``date`` (negative before it)."""
    return date_to_days(date)
