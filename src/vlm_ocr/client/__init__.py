"""The client side: a RunPod endpoint's API, one document spread over its workers, and a corpus of
them as one run."""
