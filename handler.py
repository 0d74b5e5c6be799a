"""RunPod serverless entry point: `python handler.py` (the image's command), or
`python handler.py --test_input '{"input": …}'` and `--rp_serve_api` locally. The handler
itself is `vlm_ocr.entry.runpod`."""

import sys

INTERRUPTED_STATUS = 130  # a shell's status for a command ended by Ctrl-C (128 + SIGINT)


def run() -> None:
    """The worker, and Ctrl-C before its own handler is installed (the imports take seconds)
    in one line, not a traceback."""
    try:
        # Imported here, not at the top: the render processes import this file again as they
        # start, and need none of it.
        from vlm_ocr.entry.runpod import main

        main()
    except KeyboardInterrupt:
        print("handler.py: interrupted", file=sys.stderr, flush=True)
        sys.exit(INTERRUPTED_STATUS)


if __name__ == "__main__":
    run()
