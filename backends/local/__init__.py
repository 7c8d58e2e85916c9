"""specroute: local llama.cpp tooling (build, model cache, the pair) and the simulated engine."""
