"""The learning loop: where a finished request's record goes (`sinks`: the batching queue and
the sinks' failures), the learned state taken online from each batch of records (`online`),
and the whole log read again every `learn.interval_s` (`relearn`). It imports no other room of
`router/`."""
