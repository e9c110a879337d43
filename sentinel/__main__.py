"""`python -m sentinel` is the `sentinel` command."""

from sentinel.cli import main

raise SystemExit(main())
