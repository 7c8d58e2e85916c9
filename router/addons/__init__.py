"""specroute: add-ons of the proxy (metrics, dashboard): routes, a record sink, a cleanup_ctx."""
