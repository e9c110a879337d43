"""The API against a real daemon on loopback: an HBM OOM driven through the simulator is
remediated, then listed, filtered, shown, counted in stats with its time to recovery; bad
parameters are 400 naming the parameter; responses validate against the OpenAPI document."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import pytest
from api_helpers import Rig, start_rig, wait_log_source
from fixtures_e2e import wait_for

from sentinel.api.openapi import openapi_document

pytestmark = pytest.mark.integration


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:
        yield Path(d)


@pytest.fixture
def rig(tmp_path: Path, sock_dir: Path, sink) -> Iterator[Rig]:  # noqa: ANN001
    r = start_rig(tmp_path, sock_dir, sink.url)
    yield r
    r.stop()


def _valid(body: object, schema: str) -> None:
    doc = openapi_document()
    jsonschema.validate(body, {"$ref": f"#/components/schemas/{schema}",
                               "components": doc["components"]})


def _resolved(rig: Rig) -> dict:
    def find() -> dict | None:
        items = httpx.get(f"{rig.url}/api/v1/incidents").json()["incidents"]
        return next((i for i in items if i["status"] == "resolved"), None)
    return wait_for(find, 20, "the incident to be remediated and resolved")  # type: ignore[return-value]


def test_incident_listed_filtered_shown_and_counted(rig: Rig, sink) -> None:  # noqa: ANN001
    wait_log_source(rig)
    rig.crash()
    inc = _resolved(rig)
    u = rig.url
    page = httpx.get(f"{u}/api/v1/incidents").json()
    _valid(page, "IncidentPage")
    assert inc["alertname"] == "VLLMHBMOutOfMemory" and inc["category"] == "hbm_oom"
    for query, hit in [("alertname=VLLMHBMOutOfMemory", True), ("alertname=Other", False),
                       ("target=tpu-a", True), ("target=tpu-b", False),
                       ("category=hbm_oom", True), ("category=kv_cache", False),
                       ("status=resolved", True), ("status=open", False),
                       ("since=1h", True), ("until=1h", False)]:
        ids = [i["id"] for i in httpx.get(f"{u}/api/v1/incidents?{query}").json()["incidents"]]
        assert (inc["id"] in ids) is hit, query
    detail = httpx.get(f"{u}/api/v1/incidents/{inc['id']}").json()
    _valid(detail, "IncidentDetail")
    (action,) = detail["actions"]
    assert action["status"] == "succeeded" and action["recovery_ms"] > 0
    kinds = {t["kind"] for t in detail["timeline"]}
    assert {"firing", "log_excerpt", "action", "resolved"} <= kinds
    assert detail["log_excerpts"] and detail["notifications"]
    stats = httpx.get(f"{u}/api/v1/stats?since=1h&by=category").json()
    _valid(stats, "Stats")
    (group,) = stats["groups"]
    assert group["key"] == "hbm_oom" and group["count"] == 1
    ms = float(action["recovery_ms"])
    assert group["time_to_recovery_ms"] == {"n": 1, "mean": ms, "p50": ms, "p90": ms}
    assert group["resolved_by_remediation"] == 1.0 and group["pages_sent"] >= 1
    assert group["time_to_resolve_ms"]["n"] == 1 and group["time_to_detect_ms"]["n"] == 1
    # The link every page carries (generatorURL) opens the incident's page.
    link = next(a["generatorURL"] for _, b, _ in list(sink.received) for a in b["alerts"]
                if a["labels"]["alertname"] == "VLLMHBMOutOfMemory")
    path = "/" + link.split("/", 3)[3]
    assert path == f"/incidents/{inc['id']}"
    page = httpx.get(u + path)
    assert page.status_code == 200 and "VLLMHBMOutOfMemory on tpu-a" in page.text
    targets = httpx.get(f"{u}/api/v1/targets").json()
    _valid(targets, "Targets")
    (t,) = targets["targets"]
    assert t["name"] == "tpu-a" and t["last_crash"]["category"] == "hbm_oom"
    wait_for(lambda: httpx.get(f"{u}/api/v1/targets").json()["targets"][0]["up"] == 1, 5,
             "the target to be up again")
    q = httpx.get(f"{u}/api/v1/query", params={"query": 'up{target="tpu-a"}'}).json()
    _valid(q, "QueryResult")
    assert q["status"] == "success" and q["data"]["resultType"] == "vector"
    assert q["data"]["result"][0]["metric"]["target"] == "tpu-a"
    assert q["data"]["result"][0]["value"][1] == "1"


@pytest.mark.parametrize(("path", "param"), [
    ("/api/v1/incidents?status=bogus", "status"),
    ("/api/v1/incidents?limit=0", "limit"),
    ("/api/v1/incidents?limit=many", "limit"),
    ("/api/v1/incidents?since=yesterdayish", "since"),
    ("/api/v1/incidents?until=x", "until"),
    ("/api/v1/incidents?cursor=not-a-cursor", "cursor"),
    ("/api/v1/incidents?colour=red", "colour"),
    ("/api/v1/stats?by=colour", "by"),
    ("/api/v1/stats?since=x", "since"),
    ("/api/v1/query", "query"),
    ("/api/v1/query?query=up&time=x", "time"),
    ("/api/v1/approvals?status=maybe", "status"),
    ("/api/v1/incidents/abc", "id"),
])
def test_bad_parameters_are_400_naming_the_parameter(rig: Rig, path: str, param: str) -> None:
    r = httpx.get(rig.url + path)
    assert r.status_code == 400, r.text
    body = r.json()
    _valid(body, "Error")
    assert body["param"] == param and param in body["error"]


def test_unknown_incident_is_404_json(rig: Rig) -> None:
    r = httpx.get(f"{rig.url}/api/v1/incidents/999999")
    assert r.status_code == 404 and r.json()["status"] == "error"
