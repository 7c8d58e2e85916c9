"""The learning loop: where a finished request's record goes (`sinks`: the batching queue and
the sinks' failures), the learned state taken online from each batch of records (`online`),
the whole log read again every `learn.interval_s` (`relearn`), and the classifier in force,
hot-reloaded when a retrained artifact arrives (`scorer_holder`). Of `router/` it imports only
the app's config and state (`router.config`, `router.state`)."""
