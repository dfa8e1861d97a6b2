"""Start and stop the gRPC server of ``corral server --grpc-port``: a thread pool beside
uvicorn, TLS with the REST server's certificate and key, server reflection on."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from grpc_reflection.v1alpha import reflection

from corral.api.v1 import corral_pb2, corral_pb2_grpc
from corral.errors import ValidationError
from corral.server.context import Context
from corral.server.grpc_api.servicer import CorralServicer

log = logging.getLogger("corral.server.grpc")
WORKERS = 64  # threads: unary calls and open streams together
MAX_STREAMS = WORKERS // 2  # the rest stay free for unary calls
MAX_MESSAGE = 64 << 20  # bytes; a manifest past the configured limit is refused (413's message)
SERVICE_NAME = corral_pb2.DESCRIPTOR.services_by_name["Corral"].full_name


def start_grpc(ctx: Context, port: int | None = None) -> grpc.Server:
    """Serve ``corral.v1.Corral`` on ``host:port`` of ``ctx.settings`` (``grpc_port``
    unless ``port`` is given), TLS when the REST server has a certificate."""
    settings = ctx.settings
    port = settings.grpc_port if port is None else port
    server = grpc.server(
        ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="grpc"),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.so_reuseport", 0),
        ],
    )
    corral_pb2_grpc.add_CorralServicer_to_server(CorralServicer(ctx, MAX_STREAMS), server)
    reflection.enable_server_reflection((SERVICE_NAME, reflection.SERVICE_NAME), server)
    address = f"[{settings.host}]:{port}" if ":" in settings.host else f"{settings.host}:{port}"
    try:
        if settings.tls_cert and settings.tls_key:
            key, cert = settings.tls_key.read_bytes(), settings.tls_cert.read_bytes()
            credentials = grpc.ssl_server_credentials([(key, cert)])
            server.add_secure_port(address, credentials)
        else:
            server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ValidationError(f"--grpc-port: cannot listen on {address} ({exc})") from None
    server.start()
    scheme = "grpcs" if settings.tls_cert else "grpc"
    log.info("gRPC API (%s) at %s://%s", SERVICE_NAME, scheme, address)
    return server
