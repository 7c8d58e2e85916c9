"""Several proxies as one: the link to the shared Redis store of learned sums, load and
conversations (`link`), what is read from it, checked on the way in (`wire`, pure), the loops
that drive the link while the app runs (`loops`), a request passed to the replica that owns its
instance (`peers`), and each peer's load followed straight from it (`peer_load`). It reads the
instances, the learning loop and a request's plan; the edge and the picker use it."""
