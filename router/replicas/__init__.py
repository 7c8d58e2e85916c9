"""Several proxies as one: the shared Redis store of learned sums, load and conversations
(`link`), a request passed to the replica that owns its instance (`peers`), each peer's load
followed straight from it (`peer_load`), and how the replicas deal the instances out and how
often they collide (`contention`, pure). It reads the instances and the learning loop; nothing
below it imports it but `contention`."""
