"""specroute: backends."""
