"""`sentinel init`: a first config from the vLLM servers themselves, then the pre-flight.

    sentinel init --url http://10.0.0.5:8000 --url http://10.0.0.6:8000
    sentinel init                      # asks for the URLs (at a terminal only)
    sentinel init --examples ./deploy  # the example configs, systemd unit, dashboards
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sentinel import exitcodes
from sentinel.cli.completion import files


def add_parser(sub: Any) -> None:
    """Register `init`."""
    p = sub.add_parser("init", help="write a first config for your vLLM servers",
                       description="Ask each vLLM server (version, metrics, model) and the "
                       "Docker sockets (its container, image), write a commented config "
                       "with a policy that fits what was found, then run `check config` "
                       "on it. Without --url, asks for the URLs when run at a terminal.")
    p.add_argument("--url", action="append", default=[], metavar="URL",
                   help="a vLLM server's base URL, e.g. http://10.0.0.5:8000 (repeatable)")
    files(p.add_argument("-o", "--output", default="sentinel.yaml",
                         help="the config file to write (default sentinel.yaml)"))
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--docker-socket", action="append", default=[], metavar="PATH",
                   help="a Docker socket to look for the servers' containers on "
                   "(repeatable; /var/run/docker.sock is always looked at)")
    p.add_argument("--listen", default="127.0.0.1:9465",
                   help="the API's address written to the config (default 127.0.0.1:9465)")
    p.add_argument("--webhook-env", metavar="VAR",
                   help="page critical alerts to the webhook URL in $VAR (e.g. "
                   "ONCALL_WEBHOOK_URL); without it, incidents stay on the web page")
    files(p.add_argument("--examples", metavar="DIR",
                         help="copy the example configs, the systemd unit and the Grafana "
                         "dashboard into DIR, and stop"))
    p.set_defaults(func=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    """Write the config (or copy the examples) and run the pre-flight on it."""
    if args.examples:
        return _examples(Path(args.examples))
    out = Path(args.output)
    if out.exists() and not args.force:
        print(f"error: {out} exists: choose another --output, or --force to overwrite it",
              file=sys.stderr)
        return exitcodes.USAGE
    urls = list(args.url) or _ask()
    if not urls:
        print("error: no vLLM server: give --url URL (once per server)", file=sys.stderr)
        return exitcodes.USAGE
    return _write(urls, out, args)


def _ask() -> list[str]:
    """The URLs, asked one a line until an empty one; nothing when stdin is no terminal."""
    if not sys.stdin.isatty():
        return []
    urls: list[str] = []
    while True:
        try:
            url = input(f"vLLM server URL {len(urls) + 1} (e.g. http://10.0.0.5:8000; "
                        "empty to finish): ").strip()
        except EOFError:
            break
        if not url:
            break
        urls.append(url if "://" in url else f"http://{url}")
    return urls


def _write(urls: list[str], out: Path, args: argparse.Namespace) -> int:
    from sentinel.checks import check_config
    from sentinel.firstrun.look import DEFAULT_SOCKET, look
    from sentinel.firstrun.render import InitOptions, render

    sockets = list(dict.fromkeys([*args.docker_socket, DEFAULT_SOCKET]))
    looks = []
    for url in urls:
        found = look(url, sockets)
        print(f"{url}: " + ("vLLM " + (found.version or "?") + f", model {found.model}, "
              f"accelerator {found.accelerator}" if found.answered else "no vLLM metrics "
              f"({found.problems[0] if found.problems else 'none exposed'}); written anyway, "
              "with a comment")
              + (f", container {found.container.name}" if found.container else ""))
        looks.append(found)
    text = render(looks, InitOptions(args.listen, args.webhook_env),
                  datetime.now(tz=UTC).strftime("%Y-%m-%d"))
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}; checking it as `sentinel check config {out}` does:")
    code = check_config(str(out), sys.stdout, sys.stderr)
    if code == exitcodes.OK:
        print(f"next: sentinel run -c {out}")
    return code


def _examples(dest: Path) -> int:
    from sentinel.firstrun.examples import copy_examples

    try:
        copied, kept = copy_examples(dest)
    except (FileNotFoundError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    for path in copied:
        print(f"copied {path}")
    for path in kept:
        print(f"kept {path} (exists)")
    return exitcodes.OK
