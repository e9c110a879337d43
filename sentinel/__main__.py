"""`python -m sentinel` is the `sentinel` command."""

from sentinel.cli import console

console()
