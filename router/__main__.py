"""`python -m router` is the `specroute` command."""

from router.cli import main

raise SystemExit(main())
