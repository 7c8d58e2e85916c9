"""specroute: policies."""
