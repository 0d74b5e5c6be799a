"""The `vlm-ocr` command and what it runs: bench, eval, plan, submit, the settings docs."""
