"""Generic file helpers at the edges: YAML read and validated with line numbers, hot reload."""
