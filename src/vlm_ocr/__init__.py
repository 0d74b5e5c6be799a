"""Turn PDFs and page images into text with a self-hosted vision-language model.

The tree by role (each part imports only those below it; import-linter's contracts in
pyproject.toml check it, and nothing here imports the lab, `vlm_ocr_lab`):

    cli/        the `vlm-ocr` command a user runs: run, submit, show, review, plan
    entry/      the RunPod entry: the handler functions and the loop the worker lives on
    client/     the fan-out client (`vlm-ocr submit`) and the RunPod endpoint API
    pipeline/   the worker: a job top to bottom, the page stages, sources, render, pools
    engines/    page image → text: the vLLM server, the chat client, the CPU engine
    contract, settings, storage, images, prompts, errors, samples: the base both sides share
"""
