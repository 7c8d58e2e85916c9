"""The engine instances as the proxy sees them: the pool with each instance's in-flight work
and health (`pool`), the engines' queue gauges read in the background (`engine_load`), their
speculative counters around a request (`spec_counters`), the supervisor's restarts
(`supervision`) and the start-up capability probe's timed answers as the log's first records
(`pace_probe`). It imports no other room of `router/` but the replicas' pure share dealing
(`router.replicas.contention`)."""
