"""The Alertmanager webhook body (version 4) built from a Notification."""

from __future__ import annotations

from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of
from sentinel.respond.notify.base import classify, result_for_status
from sentinel.respond.notify.payload import alertmanager_payload, group_key, rfc3339

T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z


def _alert(target: str, state: AlertState = AlertState.FIRING, resolved: int | None = None,
           fired: int | None = T0 + 30_000) -> Alert:
    return Alert(
        group="vllm", rule="VLLMDown",
        labels=labels_of({"alertname": "VLLMDown", "severity": "page", "target": target}),
        annotations=labels_of({"summary": f"{target} down", "runbook": "r1"}),
        state=state, value=1.0, active_at_ms=T0, last_eval_ms=T0 + 60_000,
        fired_at_ms=fired, resolved_at_ms=resolved,
    )


def _note(*alerts: Alert, kind: NotificationKind = NotificationKind.FIRING) -> Notification:
    return Notification(42, kind, alerts, labels_of({"alertname": "VLLMDown"}))


def test_top_level_shape_matches_alertmanager() -> None:
    body = alertmanager_payload(_note(_alert("a")), "oncall", "http://sentinel:9465", T0)
    assert list(body) == ["version", "groupKey", "truncatedAlerts", "status", "receiver",
                          "groupLabels", "commonLabels", "commonAnnotations", "externalURL",
                          "alerts"]
    assert body["version"] == "4"
    assert body["truncatedAlerts"] == 0
    assert body["groupKey"] == '{}/{incident="42"}:{alertname="VLLMDown"}'
    [alert] = body["alerts"]
    assert list(alert) == ["status", "labels", "annotations", "startsAt", "endsAt",
                           "generatorURL", "fingerprint"]
    assert alert["generatorURL"] == "http://sentinel:9465/incidents/42"
    assert alert["fingerprint"] == _alert("a").fingerprint
    assert len(alert["fingerprint"]) == 16


def test_common_labels_and_annotations_are_the_shared_pairs() -> None:
    body = alertmanager_payload(_note(_alert("a"), _alert("b")), "r", "http://s", T0)
    assert body["commonLabels"] == {"alertname": "VLLMDown", "severity": "page"}
    assert body["commonAnnotations"] == {"runbook": "r1"}
    assert [a["labels"]["target"] for a in body["alerts"]] == ["a", "b"]


def test_status_firing_if_any_alert_fires() -> None:
    gone = _alert("b", AlertState.INACTIVE, resolved=T0 + 90_000)
    body = alertmanager_payload(_note(_alert("a"), gone), "r", "http://s", T0)
    assert body["status"] == "firing"
    assert [a["status"] for a in body["alerts"]] == ["firing", "resolved"]
    assert body["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z"
    assert body["alerts"][1]["endsAt"] == "2024-05-01T12:01:30Z"


def test_all_resolved() -> None:
    gone = _alert("a", AlertState.INACTIVE, resolved=T0 + 90_000)
    body = alertmanager_payload(_note(gone, kind=NotificationKind.RESOLVED), "r", "http://s", T0)
    assert body["status"] == "resolved"


def test_starts_at_is_fired_at_else_active_at() -> None:
    body = alertmanager_payload(_note(_alert("a"), _alert("b", fired=None)), "r", "http://s", T0)
    assert [a["startsAt"] for a in body["alerts"]] == ["2024-05-01T12:00:30Z",
                                                       "2024-05-01T12:00:00Z"]


def test_empty_group_labels_key() -> None:
    note = Notification(1, NotificationKind.FIRING, (_alert("a"),))
    assert group_key(note) == '{}/{incident="1"}:{}'
    assert alertmanager_payload(note, "r", "http://s", T0)["groupLabels"] == {}


def test_rfc3339_like_go() -> None:
    assert rfc3339(T0) == "2024-05-01T12:00:00Z"
    assert rfc3339(T0 + 250) == "2024-05-01T12:00:00.25Z"
    assert rfc3339(T0 + 7) == "2024-05-01T12:00:00.007Z"
    assert rfc3339(0) == "1970-01-01T00:00:00Z"


def test_classify_table() -> None:
    rows = {None: True, 200: False, 204: False, 301: False, 400: False, 401: False,
            404: False, 429: True, 500: True, 502: True, 599: True}
    assert {s: classify(s) for s in rows} == rows
    assert result_for_status(202, "x").ok and not result_for_status(202, "x").retryable
    bad = result_for_status(503, "x")
    assert (bad.ok, bad.retryable, bad.status) == (False, True, 503)
