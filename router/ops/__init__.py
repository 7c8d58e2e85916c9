"""specroute: the operator's tools (tail, report, projection, demo)."""
