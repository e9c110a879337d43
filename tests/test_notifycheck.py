"""`check config` says who is told what (issue 48's defaults): warnings, pages, fixes."""

from __future__ import annotations

from pathlib import Path

from sentinel.config import parse_config
from sentinel.notifycheck import TIMELINE_ONLY, told, who_is_told
from sentinel.preflight import NOTE, WARNING

ROOT = Path(__file__).resolve().parent.parent
HOOK = {"url": "http://127.0.0.1:9/hook"}
PD = {"routing_key": "R0UT1NGKEY0123456789abcdefabcdef"}


def _config(**doc: object):  # noqa: ANN202
    return parse_config({"rule_files": [], **doc})


def test_the_minimal_example_pages_no_warnings(monkeypatch) -> None:
    import yaml

    monkeypatch.setenv("ONCALL_WEBHOOK_URL", "http://127.0.0.1:9/oncall")
    text = (ROOT / "deploy" / "examples" / "minimal.yaml").read_text()
    doc = yaml.safe_load(text.replace("${ONCALL_WEBHOOK_URL}", "http://127.0.0.1:9/oncall"))
    config = _config(**doc)
    assert told(config, "critical") == ["oncall"]
    assert told(config, "warning") == []
    [note] = who_is_told(config)
    assert note.kind == NOTE and f"warnings (Sentinel's own self-alerts among them) go to " \
        f"{TIMELINE_ONLY}" in note.message


def test_warnings_reaching_pagerduty_are_a_warning() -> None:
    config = _config(receivers=[{"name": "pd", "pagerduty": PD}])
    kinds = [(f.kind, f.message.split(":")[0]) for f in who_is_told(config)]
    assert (WARNING, "warnings page pd (PagerDuty)") in kinds


def test_where_the_fixed_notice_goes_is_said() -> None:
    policy = {"name": "p", "alerts": ["VLLMEngineDead"],
              "steps": [{"docker_restart": {"container": "vllm"}}]}
    quiet = _config(receivers=[{"name": "chat", "webhook": HOOK}],
                    remediation={"policies": [policy]})
    [fixed] = [f for f in who_is_told(quiet) if f.key == "notify.act_first.receiver"]
    assert "the incident timeline only" in fixed.message
    told_chat = _config(receivers=[{"name": "chat", "webhook": HOOK}],
                        remediation={"policies": [policy]},
                        notify={"act_first": {"receiver": "chat"}})
    [fixed] = [f for f in who_is_told(told_chat) if f.key == "notify.act_first.receiver"]
    assert "goes to receiver chat (webhook)" in fixed.message
    # No policy, no fixes: nothing said about them.
    assert not [f for f in who_is_told(_config()) if f.key == "notify.act_first.receiver"]


def test_no_receivers_is_said_too() -> None:
    [note] = who_is_told(_config())
    assert note.message == (f"critical alerts go to {TIMELINE_ONLY}; warnings (Sentinel's own "
                            f"self-alerts among them) go to {TIMELINE_ONLY}")
