"""The `vlm-ocr` command: what a user runs on their own documents and endpoint (run, submit,
show, review, plan). Each command is a module here with its own `add_arguments`; `main` holds
the parser."""
