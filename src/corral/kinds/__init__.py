"""Job kinds (SPEC section 8): PyTorch, JAX, MPI, Ray and TPU jobs as plugins."""
