"""Recurring time intervals (issue 35): Alertmanager's `time_intervals`, checked against amtool.

What Sentinel accepts and refuses is compared with the real `amtool check-config` (Debian's
prometheus-alertmanager; required under CI=true, skipped elsewhere without it); what an
interval contains follows Alertmanager's rules (times end-exclusive, ranges inclusive,
negative days from the month's end, the interval's location).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from notify_helpers import loopback  # noqa: F401

from sentinel.config import parse_config
from sentinel.config.errors import ConfigError
from sentinel.config.timeintervals import interval_table
from sentinel.respond.remediate.guards import silenced_by
from sentinel.timeintervals import active, parse_interval


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def _in(spec: dict[str, Any], when: str) -> bool:
    return active([parse_interval(spec)], _ms(when))


@pytest.mark.parametrize(("spec", "when", "inside"), [
    # times: start included, end excluded; 24:00 ends the day
    ({"times": [{"start_time": "22:00", "end_time": "24:00"}]}, "2026-11-27T22:00:00+00:00", True),
    ({"times": [{"start_time": "22:00", "end_time": "24:00"}]}, "2026-11-27T23:59:59+00:00", True),
    ({"times": [{"start_time": "09:00", "end_time": "17:00"}]}, "2026-11-27T17:00:00+00:00", False),
    # weekdays: Sunday = 0, names case-insensitive, ranges inclusive (2026-11-27 is a Friday)
    ({"weekdays": ["Monday:friday"]}, "2026-11-27T12:00:00+00:00", True),
    ({"weekdays": ["saturday", "sunday"]}, "2026-11-27T12:00:00+00:00", False),
    ({"weekdays": ["sunday"]}, "2026-11-29T00:00:00+00:00", True),
    # days of the month: negative from the end; the 31st is not in a 30-day month
    ({"days_of_month": ["-1"]}, "2026-11-30T08:00:00+00:00", True),
    ({"days_of_month": ["-7:-1"]}, "2026-11-23T08:00:00+00:00", False),
    ({"days_of_month": ["-7:-1"]}, "2026-11-24T08:00:00+00:00", True),
    ({"days_of_month": ["31"]}, "2026-11-30T08:00:00+00:00", False),
    ({"days_of_month": ["25:31"]}, "2026-02-28T08:00:00+00:00", True),
    ({"days_of_month": ["1:-1"]}, "2026-02-15T08:00:00+00:00", True),
    # months by name or number, years inclusive
    ({"months": ["november"]}, "2026-11-27T12:00:00+00:00", True),
    ({"months": ["1:3", "december"]}, "2026-11-27T12:00:00+00:00", False),
    ({"years": ["2025:2026"]}, "2026-11-27T12:00:00+00:00", True),
    ({"years": ["2027"]}, "2026-11-27T12:00:00+00:00", False),
    # every field must match
    ({"weekdays": ["friday"], "times": [{"start_time": "02:00", "end_time": "04:00"}]},
     "2026-11-27T03:00:00+00:00", True),
    ({"weekdays": ["thursday"], "times": [{"start_time": "02:00", "end_time": "04:00"}]},
     "2026-11-27T03:00:00+00:00", False),
    # the location's wall clock: 02:00-04:00 in Amsterdam is 01:00-03:00 UTC in winter
    ({"times": [{"start_time": "02:00", "end_time": "04:00"}], "location": "Europe/Amsterdam"},
     "2026-11-27T01:30:00+00:00", True),
    ({"times": [{"start_time": "02:00", "end_time": "04:00"}], "location": "Europe/Amsterdam"},
     "2026-11-27T03:30:00+00:00", False),
    # ...and a Friday night in New York is Saturday in UTC
    ({"weekdays": ["friday"], "location": "America/New_York"}, "2026-11-28T03:00:00+00:00",
     True),
])
def test_what_an_interval_contains(spec: dict[str, Any], when: str, inside: bool) -> None:
    assert _in(spec, when) is inside


# Specs amtool accepts or refuses; Sentinel must agree on each.
SPECS: list[dict[str, Any]] = [
    {"times": [{"start_time": "09:00", "end_time": "17:00"}]},
    {"times": [{"start_time": "00:00", "end_time": "24:00"}]},
    {"times": [{"start_time": "17:00", "end_time": "09:00"}]},
    {"times": [{"start_time": "9:00", "end_time": "17:00"}]},
    {"times": [{"start_time": "01:99", "end_time": "23:59"}]},
    {"times": [{"start_time": "09:00"}]},
    {"weekdays": ["monday:friday", "Sunday"]},
    {"weekdays": ["friday:monday"]},
    {"weekdays": ["1:3"]},
    {"weekdays": ["blurgsday"]},
    {"days_of_month": ["1:5", "-3:-1"]},
    {"days_of_month": ["0"]},
    {"days_of_month": ["32"]},
    {"days_of_month": ["-5:5"]},
    {"days_of_month": ["1:-1"]},
    {"days_of_month": ["25:-10"]},
    {"days_of_month": ["-1:-3"]},
    {"months": ["january:march", "12"]},
    {"months": ["march:january"]},
    {"months": ["smarch"]},
    {"years": ["2020:2022", "2030"]},
    {"years": ["2022:2020"]},
    {"location": "Europe/Amsterdam"},
    {"location": "Mars/Olympus_Mons"},
]


def _amtool() -> str:
    path = shutil.which("amtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("amtool is required in CI (Debian package prometheus-alertmanager)")
        pytest.skip("amtool not installed")
    return path


def _amtool_accepts(amtool: str, spec: dict[str, Any], folder: Path) -> bool:
    config = {"route": {"receiver": "r", "routes": [{"receiver": "r",
                                                     "mute_time_intervals": ["t"]}]},
              "receivers": [{"name": "r"}],
              "time_intervals": [{"name": "t", "time_intervals": [spec]}]}
    path = folder / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True,
                          timeout=60)
    return done.returncode == 0


def _sentinel_accepts(spec: dict[str, Any]) -> bool:
    try:
        parse_config({"time_intervals": [{"name": "t", "time_intervals": [spec]}]})
    except ConfigError:
        return False
    return True


def test_sentinel_accepts_and_refuses_what_amtool_does(tmp_path: Path) -> None:
    amtool = _amtool()
    verdicts = [(spec, _amtool_accepts(amtool, spec, tmp_path), _sentinel_accepts(spec))
                for spec in SPECS]
    disagree = [(spec, am, ours) for spec, am, ours in verdicts if am != ours]
    assert disagree == [], disagree
    assert {am for _, am, _ in verdicts} == {True, False}  # both kinds are in the table


def test_a_refusal_names_the_field() -> None:
    with pytest.raises(ConfigError, match="days_of_month") as info:
        parse_config({"time_intervals": [{"name": "t", "time_intervals": [
            {"days_of_month": ["-5:5"]}]}]})
    assert "time_intervals" in str(info.value)


def _config(silence: dict[str, Any]) -> Any:
    return parse_config({
        "time_intervals": [{"name": "weekly-maintenance", "time_intervals": [
            {"weekdays": ["tuesday"], "times": [{"start_time": "02:00", "end_time": "04:00"}]}]}],
        "remediation": {"silences": [silence]},
    })


def test_a_recurring_remediation_silence_holds_only_inside_its_window() -> None:
    cfg = _config({"matchers": {"pool": "spot"}, "time_intervals": ["weekly-maintenance"],
                   "comment": "weekly kernel patching"})
    table = interval_table(cfg.time_intervals)
    silences = cfg.remediation.silences
    tuesday_3am = _ms("2026-12-01T03:00:00+00:00")
    assert silenced_by({"pool": "spot"}, silences, tuesday_3am, table) is silences[0]
    assert silenced_by({"pool": "spot"}, silences, tuesday_3am + 3_600_000, table) is None
    assert silenced_by({"pool": "spot"}, silences, tuesday_3am + 7 * 86_400_000,
                       table) is silences[0]  # and again the next week
    assert silenced_by({"pool": "reserved"}, silences, tuesday_3am, table) is None


def test_an_unknown_interval_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no time interval named 'nightly'"):
        _config({"matchers": {"pool": "spot"}, "time_intervals": ["nightly"]})


def test_a_silence_is_either_one_off_or_recurring() -> None:
    with pytest.raises(ConfigError, match="either starts and ends, or time_intervals"):
        _config({"matchers": {"pool": "spot"}, "time_intervals": ["weekly-maintenance"],
                 "starts": datetime(2026, 12, 1, tzinfo=UTC).isoformat(),
                 "ends": datetime(2026, 12, 2, tzinfo=UTC).isoformat()})
    with pytest.raises(ConfigError, match="starts and ends are required"):
        _config({"matchers": {"pool": "spot"}})


# -- routes: mute_time_intervals / active_time_intervals ------------------------------------

def _route_config(**child: Any) -> Any:
    return parse_config({
        "receivers": [{"name": "oncall", "webhook": {"url": "http://127.0.0.1:9/hook"}}],
        "time_intervals": [{"name": "nights", "time_intervals": [
            {"times": [{"start_time": "00:00", "end_time": "06:00"}]}]}],
        "notify": {"route": {"receiver": "oncall", "group_wait": "0s", "group_interval": "1m",
                             "routes": [{"matchers": ['severity="warning"'], **child}]}},
    })


def test_the_root_route_cannot_be_muted_and_names_must_exist() -> None:
    with pytest.raises(ConfigError, match="no time interval named 'weekends'"):
        _route_config(mute_time_intervals=["weekends"])
    with pytest.raises(ConfigError, match="root route cannot have"):
        parse_config({
            "receivers": [{"name": "oncall", "webhook": {"url": "http://127.0.0.1:9/hook"}}],
            "time_intervals": [{"name": "nights", "time_intervals": [{"weekdays": ["monday"]}]}],
            "notify": {"route": {"receiver": "oncall", "mute_time_intervals": ["nights"]}}})


@pytest.mark.parametrize(("key", "sent_at_night"), [
    ("mute_time_intervals", False), ("active_time_intervals", True)])
def test_a_route_sends_only_as_its_time_intervals_say(
        incident_db, loopback, key: str, sent_at_night: bool) -> None:  # noqa: F811
    """A warning at 03:00 on a route muted at night waits for 06:00, then goes once; on a
    route active only at night it goes at once. Time is passed in."""
    from dataclasses import replace

    from notify_helpers import make_stage

    from sentinel.model import Alert, AlertState, labels_of
    from sentinel.respond.notify.webhook import WebhookReceiver

    cfg = _route_config(**{key: ["nights"]})
    stage = make_stage(incident_db, {"oncall": WebhookReceiver("oncall", loopback.url(),
                                                               timeout_s=5)},
                       cfg.notify.route)
    stage.dispatcher.settings = replace(stage.dispatcher.settings,
                                        intervals=interval_table(cfg.time_intervals))
    night = _ms("2026-11-27T03:00:00+00:00")
    alert = Alert(group="g", rule="KVCacheHigh",
                  labels=labels_of({"alertname": "KVCacheHigh", "target": "a",
                                    "severity": "warning"}),
                  annotations=(), state=AlertState.FIRING, value=1.0, active_at_ms=night,
                  last_eval_ms=night, fired_at_ms=night)
    stage.tracker.process([alert], night)
    stage.tick(night)
    assert (len(loopback.accepted()) == 1) is sent_at_night
    for minutes in range(1, 4 * 60, 10):  # flushes every group_interval until 07:00
        stage.tick(night + minutes * 60_000)
    assert len(loopback.accepted()) == 1  # once, at 03:00 or at the first flush after 06:00
    first = loopback.accepted()[0]
    if not sent_at_night:
        assert first.json()["status"] == "firing"
