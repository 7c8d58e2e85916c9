"""Several proxies as one: the shared Redis store of learned sums, load and conversations
(`link`), a request passed to the replica that owns its instance (`peers`), and each peer's
load followed straight from it (`peer_load`). It reads the instances, the learning loop and a
request's plan; the edge and the picker use it, nothing below them."""
