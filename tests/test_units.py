"""ddptop.units: the exact text of every formatter, since tables, snapshots and scripts read these strings."""

from __future__ import annotations

import pytest

from ddptop import units


def test_unknown_is_a_dash_or_na_as_the_caller_asks():
    for fmt in (units.number, units.significant, units.seconds, units.milliseconds, units.microseconds,
                units.binary_bytes, units.gib, units.gbps, units.rate, units.percent, units.duration):
        assert fmt(None) == "-"
        assert fmt(None, missing=units.NA) == "N/A"


def test_number_and_significant():
    assert units.number(0) == "0.00"
    assert units.number(1.005, 1) == "1.0"
    assert units.number(2.5, 0, " W") == "2 W"  # round half to even, as format() does
    assert units.number(1.234, 2, "x") == "1.23x"
    assert units.number(1e15, 0) == "1000000000000000"
    assert units.significant(0.000123456) == "0.000123"
    assert units.significant(123456.0) == "1.23e+05"
    assert units.significant(0) == "0"


def test_seconds_milliseconds_microseconds():
    assert units.seconds(0.123456) == "0.1235"
    assert units.seconds(0) == "0.0000"
    assert units.seconds(0.1, 3) == "0.100"
    assert units.seconds(12.345, 1, unit=True) == "12.3 s"
    assert units.milliseconds(0.0123) == "12.3 ms"
    assert units.milliseconds(0) == "0.0 ms"
    assert units.milliseconds(3600) == "3600000.0 ms"
    assert units.microseconds(0.0000123) == "12.3 us"


def test_binary_bytes_picks_the_largest_unit_it_fills():
    assert units.binary_bytes(0) == "0 B"
    assert units.binary_bytes(1023) == "1023 B"
    assert units.binary_bytes(1024) == "1.0 KiB"
    assert units.binary_bytes(1.5 * (1 << 20)) == "1.5 MiB"
    assert units.binary_bytes((1 << 30) - 1) == "1024.0 MiB"  # one byte short of a GiB still reads MiB
    assert units.binary_bytes(1 << 30) == "1.0 GiB"
    assert units.binary_bytes(1e15) == "931322.6 GiB"  # no unit beyond GiB


def test_gib_is_a_bare_number_for_columns_that_name_the_unit():
    assert units.gib(0) == "0.0"
    assert units.gib(80 * (1 << 30)) == "80.0"
    assert units.gib(1 << 29) == "0.5"


def test_gbps_both_ways():
    # the report: GB/s in, three significant digits and the unit out
    assert units.gbps(12.345) == "12.3 GB/s"
    assert units.gbps(0.0123) == "0.0123 GB/s"
    assert units.gbps(0) == "0 GB/s"
    assert units.gbps(1234.5) == "1.23e+03 GB/s"
    # NVML's counters: bytes/s in, one decimal and no unit out
    assert units.gbps(25e9, from_bytes=True, compact=True) == "25.0"
    assert units.gbps(0, from_bytes=True, compact=True) == "0.0"
    assert units.gbps(None, from_bytes=True, compact=True, missing=units.NA) == "N/A"


def test_rate_keeps_decimals_only_below_100_when_asked():
    assert units.rate(319.4) == "319"
    assert units.rate(0.4) == "0"
    assert units.rate(99.96, digits_below_100=1) == "100.0"  # below 100 before rounding
    assert units.rate(12.34, digits_below_100=1) == "12.3"
    assert units.rate(123.4, digits_below_100=1) == "123"
    assert units.rate(1e15) == "1000000000000000"


def test_percent_of_fractions_and_of_percentages():
    assert units.percent(0.42) == "42%"
    assert units.percent(0) == "0%"
    assert units.percent(1.234, 1) == "123.4%"
    assert units.percent(0.031, 1, signed=True) == "+3.1%"
    assert units.percent(-0.004, 1, signed=True) == "-0.4%"
    assert units.percent(0.0, 1, signed=True) == "+0.0%"
    assert units.percent(87, fraction=False) == "87%"
    assert units.percent(None, fraction=False, missing=units.NA) == "N/A"


def test_duration():
    assert units.duration(0) == "0:00"
    assert units.duration(-5) == "0:00"
    assert units.duration(59.9) == "0:59"
    assert units.duration(3599) == "59:59"
    assert units.duration(3600) == "1:00:00"
    assert units.duration(3725.7) == "1:02:05"
    assert units.duration(2 * 86400) == "48:00:00"


def test_pair_of_values_and_of_written_text():
    assert units.pair(None, None, units.gib) == "N/A"
    assert units.pair(1 << 30, None, units.gib) == "1.0/-"
    assert units.pair(1 << 30, 2 << 30, units.gib) == "1.0/2.0"
    assert units.pair("N/A", "N/A") == "N/A"
    assert units.pair("-", "-") == "-/-"  # text: only `missing` itself counts as unknown
    assert units.pair("1.0", "N/A") == "1.0/N/A"


@pytest.mark.parametrize("value", [None, 0, 0.5, 99.96, 100, 1e9, 1 << 30, -1.0])
def test_tui_cells_keep_their_text(value):
    from ddptop.tui import format as fmt

    assert fmt.gib(value) == ("-" if value is None else f"{value / (1 << 30):.1f}")
    assert fmt.gbps(value) == ("N/A" if value is None else f"{value / 1e9:.1f}")
    assert fmt.seconds(value) == ("-" if value is None else f"{value:.4f}")
    assert fmt.rate(value) == ("-" if value is None else (f"{value:.0f}" if value >= 100 else f"{value:.1f}"))
