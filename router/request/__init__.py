"""One request's plan and record, for both front ends (the HTTP edge and the Envoy picker): its
body as JSON (`json_body`), its bad input as OpenAI-style errors (`errors`), the routing plan
(`routing`, pure), the bytes sent upstream (`upstream_body`, pure), its two ends around the
engine's answer (`lifecycle`: the plan from the app's state, the bookkeeping once the answer has
left) and its decision-log record (`log_record`). It reads the instances and the learning loop;
it never imports the edge, the picker or the replicas."""
