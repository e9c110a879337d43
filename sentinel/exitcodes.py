"""The `sentinel` command's exit codes: one table, the same code for the same error everywhere.

A configuration `run` would refuse exits `CONFIG` from `run`, from `check config`
and from every other command that reads it; a database that cannot be reached
exits `UNAVAILABLE` whichever command tried. The split between the two lets a
supervisor tell "fix the file" (restarting cannot help: systemd's
`RestartPreventExitStatus=3`) from "the host is not ready" (a restart may).
`sentinel --help` prints the table; the docs quote it.
"""

from __future__ import annotations

OK = 0
# The command ran and its answer is no: a rule test failed, `check config --scrape` found
# a blind rule, an incident does not exist, the daemon stopped on an error after starting.
FAILURE = 1
# The command line is wrong: an unknown option, a malformed --listen or --since.
USAGE = 2
# The configuration is invalid: the file, a file it names (rule files, secret files,
# signatures), an environment variable it needs, or a value `run` refuses (a listen
# address off loopback without tokens, a placeholder token, a glob matching nothing).
CONFIG = 3
# The configuration is valid but this host cannot run it now: the database is
# unreachable, not writable or its driver is missing; the listen address is in use.
UNAVAILABLE = 4
# Interrupted by Ctrl-C (SIGINT), as shells report it.
INTERRUPTED = 130

TABLE: tuple[tuple[int, str], ...] = (
    (OK, "success"),
    (FAILURE, "the command ran and failed: a rule test, a --scrape check, an incident not "
              "found, the daemon stopping on an error"),
    (USAGE, "wrong command line: unknown option or malformed argument"),
    (CONFIG, "invalid configuration: the file, a file or variable it needs, or a value "
             "`run` refuses"),
    (UNAVAILABLE, "valid configuration this host cannot run now: database unreachable or "
                  "not writable, driver missing, listen address in use"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)


def help_text() -> str:
    """The table as `sentinel --help` ends it."""
    return "exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in TABLE)
