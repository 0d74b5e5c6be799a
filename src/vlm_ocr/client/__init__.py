"""The client side: a RunPod endpoint's API, and spreading a large PDF over its workers."""
