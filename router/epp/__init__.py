"""specroute as the endpoint picker behind Envoy (`specroute epp`): the Gateway API Inference
Extension's protocol over Envoy's external-processing gRPC stream."""
