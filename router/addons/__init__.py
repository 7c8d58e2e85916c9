"""specroute: add-ons of the proxy (metrics, dashboard), each bringing its routes and record sink."""
