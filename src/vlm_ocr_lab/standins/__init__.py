"""Stand-ins for tests and benchmarks: a RunPod endpoint on loopback, an S3 server on loopback,
and fake engines and stores. Needs the `testing` extra; no part of the worker imports it."""
