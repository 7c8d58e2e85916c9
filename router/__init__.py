"""specroute: router."""
