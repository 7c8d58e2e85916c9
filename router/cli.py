"""`specroute`: one CLI, noun groups and verb commands (`python -m router` works too).

Every option has help and shows its default. Commands from the other packages register
themselves through their `register(subparsers, ...)` functions; each reads the decision log
through `decisionlog` itself.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from policies.policy_commands import ConfigFacts

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

from router.config import Config, ConfigError, load_config

Formatter = argparse.ArgumentDefaultsHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specroute",
        description="Route each OpenAI-compatible request to the speculative (MTP-1) or the plain "
        "backend, whichever decodes it faster.",
        formatter_class=Formatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_serve(sub)
    _add_epp(sub)
    _add_demo(sub)
    for register in _registrars():
        register(sub)
    return parser


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve", help="run the routing proxy", formatter_class=Formatter,
        description="Run the proxy: a drop-in OpenAI base_url (http://HOST:PORT/v1).",
    )
    serve.add_argument("--config", default="config.yaml", help="config file")
    serve.add_argument("--host", default=None, help="listen address (overrides config listen.host)")
    serve.add_argument("--port", type=int, default=None, help="port (overrides config listen.port)")
    serve.add_argument("--log-format", choices=("console", "json"), default="console",
                       help="format of the operator log on stderr")
    serve.set_defaults(func=_serve)


def _add_epp(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    epp = sub.add_parser(
        "epp", help="run as the endpoint picker behind Envoy (Gateway API Inference Extension)",
        formatter_class=Formatter,
        description="Serve Envoy's external-processing gRPC stream (envoy.service.ext_proc.v3."
        "ExternalProcessor) as the Gateway API Inference Extension's endpoint picker: for each "
        "request Envoy sends its headers and body (FULL_DUPLEX_STREAMED), the picker makes the "
        "proxy's decision and answers with the chosen instance, primary first, as ip:port in "
        "the header x-gateway-destination-endpoint and in the envoy.lb dynamic metadata, the "
        "body as the engine must get it, or an immediate 4xx (bad request) or 503 (no healthy "
        "instance). The answer's headers and body pass through it, observed for the decision "
        "log. Instances must be named http://<ip>:<port>. /readyz, /metrics and /dashboard stay "
        "on the config's listen address; gRPC health (liveness, readiness) on the gRPC port. "
        "Envoy's side: deploy/envoy/envoy.yaml (--endpoints primary) or "
        "deploy/envoy/envoy-fallback.yaml (--endpoints list).",
    )
    epp.add_argument("--config", default="config.yaml", help="config file")
    epp.add_argument("--grpc-host", default="127.0.0.1", help="gRPC listen address")
    epp.add_argument("--grpc-port", type=int, default=9002,
                     help="gRPC port Envoy's ext_proc filter connects to (0: a free one)")
    epp.add_argument("--endpoints", choices=("primary", "list"), default="primary",
                     help="primary: the chosen instance only, one ip:port, which every gateway "
                     "takes: use it with deploy/envoy/envoy.yaml and with a gateway that sends "
                     "InferencePool traffic to an ORIGINAL_DST cluster (a list there makes every "
                     "request a 503); list: the chosen one, then the other allowed ones as "
                     "fallbacks (ip:port,ip:port), for a gateway that goes down the list, such "
                     "as deploy/envoy/envoy-fallback.yaml (Envoy's override_host policy)")
    epp.add_argument("--host", default=None, help="HTTP address for /readyz, /metrics "
                     "(overrides config listen.host)")
    epp.add_argument("--port", type=int, default=None, help="HTTP port (overrides config "
                     "listen.port)")
    epp.add_argument("--log-format", choices=("console", "json"), default="console",
                     help="format of the operator log on stderr")
    epp.set_defaults(func=_epp)
    _add_render_envoy(epp.add_subparsers(dest="epp_command", metavar="COMMAND", required=False))


def _add_render_envoy(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    render = sub.add_parser(
        "render-envoy", help="write the shipped Envoy configs filled in for this config.yaml",
        formatter_class=Formatter,
        description="Write deploy/envoy/envoy.yaml and envoy-fallback.yaml into --out with "
        "their ports filled in, and envoy-fallback.yaml's instances from the config's backends "
        "(each http://<ip>:<port>), ready for `envoy -c`.")
    render.add_argument("--config", default="config.yaml", help="config file")
    render.add_argument("--out", default="envoy", help="directory to write the configs into")
    render.add_argument("--listen-port", type=int, default=10000,
                        help="Envoy's listener on 127.0.0.1, where clients send requests")
    render.add_argument("--grpc-port", type=int, default=9002,
                        help="the picker's gRPC port (specroute epp --grpc-port)")
    render.add_argument("--admin-port", type=int, default=9901, help="Envoy's admin API port")
    render.set_defaults(func=_render_envoy)


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo", help="replay a mixed workload through the router and print a table per class",
        formatter_class=Formatter,
    )
    demo.add_argument("--backends", choices=("local", "fake"), default="local",
                      help="local: the real llama.cpp pair (built and cached on first use); "
                      "fake: two simulated GB10-paced engines")
    demo.add_argument("--front", choices=("proxy", "envoy"), default="proxy",
                      help="proxy: the client talks to specroute; envoy: to a real Envoy "
                      "(deploy/envoy/envoy.yaml, installed into the cache on first use) with "
                      "specroute as its endpoint picker")
    demo.add_argument("--replicas", type=int, choices=(1, 2, 3, 4), default=1,
                      help="2 or more: that many replicas sharing a real redis-server, nginx "
                      "round robin in front (deploy/nginx/specroute.conf; apt-get install -y "
                      "nginx redis-server); with --front proxy only")
    demo.add_argument("--engine", choices=("llamacpp", "vllm"), default="llamacpp",
                      help="local: llama-server (three Qwen2.5-Coder-1.5B instances) or vLLM on "
                      "the CPU (plain and n-gram Qwen2.5-Coder-0.5B, `make vllm` first)")
    demo.add_argument("--slots", type=int, default=None,
                      help="requests each instance serves at once: local, llama-server's "
                      "--parallel (default: its own, 4); fake, the simulated engines batch on "
                      "a GPU-like curve (default: 1, one at a time as ds4)")
    demo.add_argument("--requests", type=int, default=10, help="requests per phase")
    demo.add_argument("--max-tokens", type=int, default=None,
                      help="max_tokens of each request (default: 32 local, edits 128; 128 fake)")
    demo.add_argument("--min-samples", type=int, default=2,
                      help="requests per arm before the demo policy trusts what it learned")
    demo.add_argument("--out", default="logs/demo", help="where the demo writes its log and policy")
    demo.set_defaults(func=_demo)


def _registrars() -> list[Callable[[Subparsers], None]]:
    """The `register` functions of the other packages' command modules (`backends` and
    `policies` are handed the config loader: the config's schema lives here, in `router`)."""
    from backends import backend_commands
    from classifiers import classifier_commands
    from policies import policy_commands
    from router.ops import ops_commands

    return [
        lambda sub: backend_commands.register(sub, load_config=lambda p: load_config(p).backends),
        classifier_commands.register,
        lambda sub: policy_commands.register(sub, read_config=_config_facts),
        ops_commands.register,
    ]


def _config_facts(path: str) -> ConfigFacts:
    """What `policy check | explain --config` need from a config.yaml."""
    from policies.policy_commands import ConfigFacts
    from router.replicas.link import replica_id

    config = load_config(path)
    return ConfigFacts(
        policy=config.policy,
        pools={name: tuple(members) for name, members in config.all_pools.items()},
        backends=tuple((b.name, b.profile, b.engine) for b in config.backends),
        replica=replica_id(config) if config.replicas.store else "",
    )


def _serve(args: argparse.Namespace) -> int:
    from router.serve import run

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"specroute: invalid config:\n{exc}", file=sys.stderr)
        return 2
    return run(_with_listen(config, args.host, args.port), log_format=args.log_format)


def _epp(args: argparse.Namespace) -> int:
    from router.epp.server import PickerConfigError, check_endpoints, serve_grpc
    from router.serve import run

    try:
        config = load_config(args.config)
        check_endpoints(config)
    except (ConfigError, PickerConfigError) as exc:
        print(f"specroute: invalid config:\n{exc}", file=sys.stderr)
        return 2
    return run(_with_listen(config, args.host, args.port), log_format=args.log_format,
               beside=lambda app: serve_grpc(app, args.grpc_host, args.grpc_port,
                                             fallbacks=args.endpoints == "list"))


def _render_envoy(args: argparse.Namespace) -> int:
    from pathlib import Path

    from router.epp.envoy_config import EnvoyPorts, write_envoy_configs
    from router.epp.server import PickerConfigError

    ports = EnvoyPorts(listen=args.listen_port, picker=args.grpc_port, admin=args.admin_port)
    try:
        written = write_envoy_configs(load_config(args.config), ports, Path(args.out))
    except (ConfigError, PickerConfigError) as exc:
        print(f"specroute: invalid config:\n{exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(f"  specroute epp --config {args.config} --grpc-port {args.grpc_port}"
          "   # with envoy.yaml; add --endpoints list with envoy-fallback.yaml")
    print(f"  envoy -c {written[0]}    # clients: http://127.0.0.1:{args.listen_port}/v1")
    return 0


def _with_listen(config: Config, host: str | None, port: int | None) -> Config:
    listen = config.listen.model_copy(
        update={k: v for k, v in (("host", host), ("port", port)) if v is not None}
    )
    return config.model_copy(update={"listen": listen})


def _demo(args: argparse.Namespace) -> int:
    if args.replicas > 1 and args.front != "proxy":
        print("specroute demo: --replicas runs behind nginx (--front proxy)", file=sys.stderr)
        return 2
    if args.replicas > 1:
        from router.ops.demo_replicas import run_demo_replicas

        return run_demo_replicas(backends=args.backends, requests=args.requests,
                                 max_tokens=args.max_tokens, min_samples=args.min_samples,
                                 out=args.out, replicas=args.replicas)
    from router.ops.demo import run_demo

    if args.slots is not None and args.slots < 1:
        print("specroute demo: --slots must be 1 or more", file=sys.stderr)
        return 2
    return run_demo(backends=args.backends, requests=args.requests, max_tokens=args.max_tokens,
                    min_samples=args.min_samples, out=args.out, front=args.front,
                    slots=args.slots, engine=args.engine)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result
