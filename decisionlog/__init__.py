"""specroute: the decision log, the contract between the proxy, learner, trainer and tools."""
