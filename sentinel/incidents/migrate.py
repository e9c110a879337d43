"""The child process of `Database.upgrade_in_child`: migrate the database to the head.

Reads the URL from $SENTINEL_MIGRATE_DATABASE_URL; on failure prints one line
(the password scrubbed, as every `DatabaseError`) and exits 1.
"""

from __future__ import annotations

import os
import sys

from sentinel.incidents.db import MIGRATE_URL_ENV, Database, DatabaseError


def main() -> int:
    """Run the migration; the exit code says whether it worked."""
    url = os.environ.pop(MIGRATE_URL_ENV, "")
    if not url:
        print(f"{MIGRATE_URL_ENV} is not set", file=sys.stderr)
        return 2
    try:
        Database(url).upgrade()
    except DatabaseError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
