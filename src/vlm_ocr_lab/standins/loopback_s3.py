"""An S3 server on loopback (moto's server mode, a test dependency) for tests and benchmarks."""

from __future__ import annotations

import logging
from typing import Any


class LoopbackS3:
    """moto's threaded S3 server on 127.0.0.1 with a free port; stop() when done."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a log line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def create_bucket(self, name: str) -> str:
        s3_client(self.endpoint).create_bucket(Bucket=name)
        return name

    def settings_update(self, bucket: str) -> dict[str, Any]:
        """The bucket settings that point a worker at this server."""
        return {
            "bucket_endpoint_url": self.endpoint,
            "bucket_name": bucket,
            "bucket_access_key_id": "test",
            "bucket_secret_access_key": "test",
        }

    def env(self, bucket: str) -> dict[str, str]:
        """The same, as the environment variables of a worker process."""
        return {k.upper(): str(v) for k, v in self.settings_update(bucket).items()}

    def stop(self) -> None:
        self._server.stop()


def s3_client(endpoint: str) -> Any:
    """A plain client of a loopback server, with its test credentials."""
    import boto3

    # moto refuses CreateBucket from a client in region `auto`; R2 users create buckets anyway.
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
