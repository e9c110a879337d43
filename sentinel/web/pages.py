"""HTML for each page, rendered on the server from the API's own dicts.

Every value from the database or the config goes through `e()` (html.escape
with quotes), so a label, annotation, log line or runbook holding `<script>`
is shown as text. Nothing is inlined that a Content-Security-Policy of
`script-src 'self'` would have to allow; the only script is /static/live.js.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from sentinel.incidents.runbook_text import runbook_lines
from sentinel.web import svg


def e(value: object) -> str:
    """Escape anything for HTML text and attribute values."""
    return escape("" if value is None else str(value), quote=True)


def layout(title: str, body: str, who: str = "", csrf: str = "", scripts: bool = False) -> str:
    """The page frame: header with navigation, the body, the stylesheet and optional script."""
    login = (f'{e(who)} · <a href="/logout">log out</a>' if who
             else '<a href="/login">log in to act</a>')
    script = '<script src="/static/live.js" defer></script>' if scripts else ""
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(title)} · Sentinel</title>"
            '<link rel="stylesheet" href="/static/sentinel.css">'
            f'<meta name="csrf-token" content="{e(csrf)}">{script}</head><body>'
            '<header><a href="/">Sentinel</a><a href="/">Incidents</a>'
            '<a href="/targets">Targets</a><a href="/stats">Stats</a>'
            f'<a href="/silences">Silences</a><span class="who">{login}</span></header>'
            f"<main>{body}</main></body></html>")


def incident_rows(items: Sequence[Mapping[str, Any]]) -> str:
    """Table rows of incidents (also served alone for the live update)."""
    if not items:
        return '<tr><td colspan=6 class="muted">No incidents match.</td></tr>'
    return "".join(
        f'<tr><td><a href="/incidents/{int(i["id"])}">#{int(i["id"])}</a></td>'
        f'<td class="status-{e(i["status"])}">{e(i["status"])}</td>'
        f'<td><a href="/incidents/{int(i["id"])}">{e(i["alertname"])}</a>'
        f'<div class="muted">{e(i["summary"])}</div></td>'
        f"<td>{e(i['target'])}</td><td class=wide>{e(i['category'] or '')}</td>"
        f"<td>{e(_short(i['opened_at']))}</td></tr>" for i in items)


def incident_list(open_items: Sequence[Mapping[str, Any]], page: Mapping[str, Any],
                  filters: Mapping[str, str], rows_source: str) -> str:
    """The list: filters, open incidents first, then all matching, newest first."""
    def field(name: str, label: str) -> str:
        return (f'<input name="{name}" placeholder="{label}" aria-label="{label}" '
                f'value="{e(filters.get(name, ""))}">')
    status = filters.get("status", "")
    options = "".join(f'<option value="{v}"{" selected" if v == status else ""}>{t}</option>'
                      for v, t in (("", "any status"), ("open", "open"),
                                   ("resolved", "resolved")))
    head = ("<thead><tr><th>#</th><th>status</th><th>alert</th><th>target</th>"
            "<th class=wide>category</th><th>opened</th></tr></thead>")
    older = ""
    if page.get("next_cursor"):
        q = urlencode({**filters, "cursor": page["next_cursor"]})
        older = f'<p><a class="button" href="/?{e(q)}">older incidents →</a></p>'
    return (
        '<h1>Incidents</h1><form class="filters" method="get" action="/">'
        f'<select name="status" aria-label="status">{options}</select>'
        f'{field("alertname", "alertname")}{field("target", "target")}'
        f'{field("category", "category")}{field("since", "since (e.g. 7d)")}'
        '<button type="submit">filter</button></form>'
        f"<h2>Open now ({len(open_items)})</h2><div class=scroll><table>{head}<tbody>"
        f"{incident_rows(open_items)}</tbody></table></div>"
        '<h2>History <span id="updated" class="muted"></span></h2><div class=scroll><table>'
        f'{head}<tbody id="incident-rows" data-source="{e(rows_source)}">'
        f"{incident_rows(page['incidents'])}</tbody></table></div>{older}")


def incident_page(d: Mapping[str, Any], plot: str, csrf: str, can_write: bool) -> str:
    """One incident: summary, labels, plot, approvals, actions, runbook, excerpt, timeline."""
    inc = d["incident"]
    parts = [f'<h1>#{int(inc["id"])} {e(inc["alertname"])} on {e(inc["target"])}</h1>',
             f'<p><span class="status-{e(inc["status"])}">{e(inc["status"])}</span> · '
             f'opened {e(_short(inc["opened_at"]))}'
             + (f' · resolved {e(_short(inc["resolved_at"]))}' if inc["resolved_at"] else "")
             + f' · severity {e(inc["severity"])}</p><p>{e(inc["summary"])}</p>',
             "<h2>Labels</h2>", _labels(inc["labels"]),
             '<h2>Series</h2><div id="plot">', plot, "</div>"]
    parts.append(_approvals(d["approvals"], inc["id"], csrf, can_write))
    parts.append(_actions(d["actions"], d["decisions"]))
    parts.append(_runbooks(d["runbooks"], d["log_excerpts"]))
    parts.append(_excerpts(d["log_excerpts"]))
    parts.append(_alerts(d["alerts"]))
    parts.append(_notifications(d["notifications"]))
    parts.append('<h2>Timeline</h2><div class=scroll><table id="timeline"><thead><tr>'
                 "<th>at</th><th>kind</th><th>what</th></tr></thead><tbody>"
                 + "".join(f"<tr><td>{e(_short(t['at']))}</td><td class=kind>{e(t['kind'])}</td>"
                           f"<td>{e(t['message'])}</td></tr>" for t in d["timeline"])
                 + "</tbody></table></div>")
    return "".join(parts)


def _labels(labels: Mapping[str, Any]) -> str:
    return "<dl class=labels>" + "".join(
        f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in sorted(labels.items())) + "</dl>"


def _approvals(items: Sequence[Mapping[str, Any]], incident_id: int, csrf: str,
               can_write: bool) -> str:
    if not items:
        return ""
    rows = []
    for a in items:
        buttons = ""
        if a["status"] == "pending":
            if can_write:
                base = f"/incidents/{int(incident_id)}/approvals/{int(a['id'])}"
                buttons = "".join(
                    f'<form class=inline method=post action="{base}/{verb}">'
                    f'<input type=hidden name=csrf value="{e(csrf)}">'
                    f'<button class="{verb}" type=submit id="{verb}-{int(a["id"])}">'
                    f"{verb}</button></form> " for verb in ("approve", "deny"))
            else:
                buttons = '<a href="/login">log in with a write token to decide</a>'
        rows.append(f'<tr id="approval-{int(a["id"])}"><td>#{int(a["id"])}</td>'
                    f"<td>{e(a['action'])} ({e(a['plan'])})</td>"
                    f'<td class="approval-status">{e(a["status"])}'
                    + (f" by {e(a['decided_by'])}" if a["decided_by"] else "")
                    + f"</td><td>expires {e(_short(a['expires_at']))}</td><td>{buttons}</td></tr>")
    return ("<h2>Approvals</h2><div class=scroll><table><tbody>" + "".join(rows)
            + "</tbody></table></div>")


def _actions(actions: Sequence[Mapping[str, Any]], decisions: Sequence[Mapping[str, Any]]) -> str:
    if not actions and not decisions:
        return ""
    rows = "".join(f"<tr><td>#{int(a['id'])}</td><td>{e(a['action'])}</td>"
                   f"<td class=action-status>{e(a['status'])}</td><td>{e(a['detail'])}</td>"
                   f"<td>{e(_ms(a['recovery_ms']))}</td></tr>" for a in actions)
    guard = "".join(f"<li>{e(_short(t['at']))} {e(t['message'])}</li>" for t in decisions)
    return ("<h2>Actions</h2><div class=scroll><table id=actions><thead><tr><th>#</th>"
            "<th>action</th><th>status</th><th>detail</th><th>recovery</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div><h3>Guard decisions</h3><ul>{guard}</ul>")


def _runbooks(runbooks: Sequence[Mapping[str, Any]], excerpts: Sequence[Mapping[str, Any]]
              ) -> str:
    texts = ["\n".join(runbook_lines(r["data"] or {})) for r in runbooks[-1:]]
    if not texts:  # the signature's static runbook, until a diagnosis writes one
        texts = [str((x["data"] or {}).get("runbook", "")) for x in excerpts[-1:]]
    texts = [t for t in texts if t.strip()]
    if not texts:
        return ""
    return f"<h2>Runbook</h2><pre id=runbook>{e(texts[0])}</pre>"


def _excerpts(excerpts: Sequence[Mapping[str, Any]]) -> str:
    if not excerpts:
        return ""
    x = excerpts[-1]
    lines = (x["data"] or {}).get("excerpt") or []
    return (f"<h2>Log excerpt</h2><p class=muted>{e(x['message'])}</p>"
            f"<pre id=excerpt>{e(chr(10).join(str(line) for line in lines))}</pre>")


def _alerts(alerts: Sequence[Mapping[str, Any]]) -> str:
    return "<h2>Alerts</h2>" + "".join(
        f"<h3>{e(a['fingerprint'])} · {e(a['state'])} · value {e(_num(a['value']))}</h3>"
        f"{_labels(a['labels'])}{_labels(a['annotations'])}" for a in alerts)


def _notifications(items: Sequence[Mapping[str, Any]]) -> str:
    if not items:
        return ""
    return ("<h2>Notifications</h2><ul>" + "".join(
        f"<li>{e(_short(n['at']))} {e(n['message'])}</li>" for n in items) + "</ul>")


def targets_page(targets: Sequence[Mapping[str, Any]]) -> str:
    """Each target's health now."""
    rows = "".join(
        f"<tr><td>{e(t['name'])}</td><td>{_updown(t['up'])}</td>"
        f"<td>{_updown(t['probe_success'])}</td><td>{int(t['open_incidents'])}</td>"
        f"<td>{e(_crash(t['last_crash']))}</td></tr>" for t in targets)
    return ("<h1>Targets</h1><div class=scroll><table><thead><tr><th>target</th><th>up</th>"
            "<th>probe</th><th>open incidents</th><th>last crash</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")


def stats_page(s: Mapping[str, Any], weekly: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Counts and times per alertname, with MTTR bars now and week by week."""
    rows = "".join(
        f"<tr><td>{e(g['key'])}</td><td>{int(g['count'])}</td>"
        f"<td>{e(_ms(g['time_to_detect_ms']['mean']))}</td>"
        f"<td>{e(_ms(g['time_to_recovery_ms']['mean']))}</td>"
        f"<td>{e(_ms(g['time_to_recovery_ms']['p90']))}</td>"
        f"<td>{e(_ms(g['time_to_resolve_ms']['mean']))}</td>"
        f"<td>{e(_pct(g['resolved_by_remediation']))}</td><td>{int(g['pages_sent'])}</td></tr>"
        for g in s["groups"])
    bars = [(str(g["key"]), _sec(g["time_to_recovery_ms"]["mean"])) for g in s["groups"][:15]]
    week_bars = []
    for label, w in weekly:
        for g in w["groups"][:5]:
            week_bars.append((f"{label} {g['key']}", _sec(g["time_to_recovery_ms"]["mean"])))
    return (f"<h1>Stats since {e(_short(s['since']))}</h1><div class=scroll><table><thead><tr>"
            "<th>alert</th><th>count</th><th>detect</th><th>MTTR</th><th>p90 TTR</th>"
            "<th>resolve</th><th>by remediation</th><th>pages</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div><h2>Mean time to recovery by rule</h2>"
            + svg.bar_plot(bars, "mean time to recovery by rule")
            + "<h2>MTTR by rule, week by week</h2>"
            + svg.bar_plot(week_bars, "mean time to recovery by rule and week"))


def silences_page(items: Sequence[Mapping[str, Any]], csrf: str, can_write: bool) -> str:
    """Silences with expire buttons, and a form to add one."""
    rows = []
    for s in items:
        matchers = " ".join(f"{m['name']}{'=' if m['isEqual'] else '!'}"
                            f"{'~' if m['isRegex'] else ''}\"{m['value']}\"" for m in s["matchers"])
        expire = ""
        if can_write and s["status"]["state"] != "expired":
            expire = (f'<form class=inline method=post action="/silences/{e(s["id"])}/expire">'
                      f'<input type=hidden name=csrf value="{e(csrf)}">'
                      "<button type=submit>expire</button></form>")
        rows.append(f"<tr><td>{e(s['id'])}</td><td>{e(s['status']['state'])}</td>"
                    f"<td>{e(matchers)}</td><td>{e(_short(s['endsAt']))}</td>"
                    f"<td>{e(s['createdBy'])}: {e(s['comment'])}</td><td>{expire}</td></tr>")
    form = ""
    if can_write:
        form = ("<h2>New silence</h2><form method=post action=/silences class=filters>"
                f'<input type=hidden name=csrf value="{e(csrf)}">'
                '<input name=matchers placeholder=\'target="tpu-a" alertname=~"VLLM.*"\' '
                'aria-label=matchers required><input name=duration value=1h aria-label=duration>'
                '<input name=comment placeholder=why aria-label=comment required>'
                "<button type=submit>silence</button></form>")
    return ("<h1>Silences</h1><div class=scroll><table><thead><tr><th>id</th><th>state</th>"
            "<th>matchers</th><th>ends</th><th>by</th><th></th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>" + form)


def login_page(csrf_hint: str = "", error: str = "") -> str:
    """The token form; the token is checked and forgotten, a signed session cookie kept."""
    msg = f'<p class=flash>{e(error)}</p>' if error else ""
    return (f"<h1>Log in</h1>{msg}<form method=post action=/login class=filters>"
            '<input type=password name=token placeholder="API token" aria-label=token '
            'autocomplete=off required><button type=submit>log in</button></form>'
            "<p class=muted>Reading needs no token on loopback; approving, denying and "
            "silencing need a write token.</p>")


def _num(v: object) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _short(ts: str | None) -> str:
    return "" if not ts else ts.replace("T", " ")[:19]


def _ms(v: float | int | None) -> str:
    if v is None:
        return "–"
    return f"{v / 1000:.1f}s" if v < 120_000 else f"{v / 60_000:.1f}m"


def _sec(v: float | None) -> float | None:
    return None if v is None else v / 1000


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:.0f}%"


def _updown(v: float | None) -> str:
    if v is None:
        return '<span class=muted>?</span>'
    if v >= 1:
        return '<span class=status-resolved>up</span>'
    return '<span class=status-open>down</span>'


def _crash(c: Mapping[str, Any] | None) -> str:
    return "" if not c else f"{_short(c['at'])} {c['category']} ({c['signature']})"
