"""RunPod serverless entry point: `python handler.py` (the image's command), or
`python handler.py --test_input '{"input": …}'` and `--rp_serve_api` locally. The handler
itself is `vlm_ocr.entry.runpod`."""

from vlm_ocr.entry.runpod import main

if __name__ == "__main__":
    main()
