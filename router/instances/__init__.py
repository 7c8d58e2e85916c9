"""The engine instances as the proxy sees them: the pool with each instance's in-flight work
and health (`pool`), how several replicas deal the instances out and how often they collide
(`contention`, pure), the engines' queue gauges read in the background (`engine_load`), their
speculative counters around a request (`spec_counters`), the supervisor's restarts
(`supervision`) and the start-up capability probe's timed answers as the log's first records
(`pace_probe`). Of `router/` it imports only the app's config and state (`router.config`,
`router.state`)."""
