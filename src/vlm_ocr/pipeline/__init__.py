"""The worker's pipeline: a job top to bottom (`job`), a page's stages (`page`, `stages/`), and
what they stand on: sources and fetching, rendering, the process pools, orientation, the
comparison of two readings, and the verdict."""
