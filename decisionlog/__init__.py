"""specroute: the decision log, the contract between the proxy, the learner, the trainer and the tools."""
