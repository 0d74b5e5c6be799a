"""The lab: what measures and checks the worker, apart from the worker itself.

    bench/      `vlm-ocr-lab bench`: the pipeline's pages/s and time per stage (pipeline), peak
                memory (memory), page structure (layout), a document over local workers
                (fanout), headers and footers on known furniture (furniture)
    evaluate    `vlm-ocr-lab eval`: an engine scored against ground truth, or two outputs compared
    docs/       the parts of the docs written from the code (settings, families)
    standins/   stand-ins for tests and benchmarks: a RunPod endpoint and an S3 server on
                loopback, fake engines and stores, a chat server that answers at once

The lab imports the product (`vlm_ocr`); nothing in the product imports the lab (`make lint`
checks it), and the worker's image does not carry it. The stand-ins need the `testing` extra.
"""
