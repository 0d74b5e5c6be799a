"""The parts of the docs that are written from the code, and the marked regions they fill."""
