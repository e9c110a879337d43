"""The Watchdog route docs/how-to/notifications.md documents works as written: the
always-firing Watchdog alert goes to the dead man's switch and repeats every minute, other
alerts keep the 4 h default repeat the page warns about."""

from __future__ import annotations

import re
from pathlib import Path

from sentinel.config import load_config
from sentinel.model import labels_of
from sentinel.respond.notify.dispatcher import watchdog_alert
from sentinel.respond.notify.routing import build_route, match_routes

PAGE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "notifications.md"


def _documented_block() -> str:
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S)
    (block,) = [b for b in blocks if "watchdog: true" in b and 'alertname="Watchdog"' in b]
    return block


def test_the_documented_watchdog_route_repeats_every_minute_to_the_switch(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(
        f"database: sqlite:///{tmp_path / 'sentinel.db'}\n"
        "rule_files: [rules.yaml]\n"
        "targets:\n  - {name: a, url: 'http://127.0.0.1:9'}\n"
        "receivers:\n"
        "  - {name: oncall, webhook: {url: 'http://127.0.0.1:9/oncall'}}\n"
        "  - {name: deadmansswitch, webhook: {url: 'http://127.0.0.1:9/switch'}}\n"
        + _documented_block())
    config = load_config(cfg)
    assert config.notify.watchdog
    route = build_route(config.notify.route, [r.name for r in config.receivers])
    assert route is not None
    (switch,) = match_routes(route, watchdog_alert(0).labels)
    assert (switch.receiver, switch.group_wait_ms, switch.repeat_interval_ms) == (
        "deadmansswitch", 0, 60_000)
    (other,) = match_routes(route, labels_of({"alertname": "VLLMTargetDown", "target": "a"}))
    assert (other.receiver, other.repeat_interval_ms) == ("oncall", 4 * 3600_000)
