"""Node providers: what creates and deletes the nodes of pools (SPEC section 10)."""
