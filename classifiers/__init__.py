"""specroute: classifiers."""
