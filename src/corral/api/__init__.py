"""Wire definitions of Corral's APIs besides REST: ``v1/corral.proto`` (gRPC)."""
