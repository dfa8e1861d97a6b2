"""The gRPC API (SPEC section 11): ``corral.v1.Corral`` beside the REST API, in the same
process, over the same services (``servicer.py``); started by ``server.start_grpc``."""
