"""RemotePolicy against a real model server: `transformers serve` on 127.0.0.1 serving a tiny random
LLaVA that the test builds offline (tests/policy/tiny_llava.py). Random weights produce gibberish, so
a step ends in PolicyOutputError or ReplyCutOffError -- what matters is that the request (system
prompt, images as data URLs, schema) is accepted by a real OpenAI-compatible implementation and its
reply travels back into Holodesk's error types with the raw text.

Needs the `serve-test` extra (transformers, torch, fastapi, uvicorn, openai); skipped without it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from holodesk.errors import PolicyOutputError
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.remote import RemotePolicy, ReplyCutOffError
from tests.helpers.processes import stop_process
from tests.policy.remote_helpers import make_observation

for module in ("torch", "transformers", "fastapi", "uvicorn", "openai"):
    pytest.importorskip(module, reason=f"`transformers serve` needs {module} (pip install -e '.[serve-test]')")

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
START_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("tserve")
    model = root / "tiny-llava"
    subprocess.run([sys.executable, str(HERE / "tiny_llava.py"), str(model)], check=True, timeout=300,
                   capture_output=True)
    (root / "hub").mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(root / "hub"), "HF_HOME": str(root / "hf")}
    cli = Path(sys.executable).with_name("transformers")
    log = open(root / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([str(cli), "serve", str(model), "--host", "127.0.0.1", "--port", str(port),
                             "--device", "cpu", "--log-level", "info"], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail("transformers serve exited:\n" + (root / "serve.log").read_text()[-3000:])
        try:
            with urllib.request.urlopen(url + "/models", timeout=2):
                break
        except OSError:
            time.sleep(0.5)
    else:
        stop_process(proc, timeout=10)
        pytest.fail("transformers serve did not start in time")
    yield url, str(model), root / "serve.log"
    stop_process(proc, timeout=10)
    log.close()


def test_step_round_trips_through_transformers_serve(served):
    url, model, log_path = served
    pol = RemotePolicy(url, model, api_key=None, options=GenerationOptions(max_reply_tokens=12), retries=0)
    with pol, pytest.raises((ReplyCutOffError, PolicyOutputError)) as ei:
        pol.propose(make_observation(history=2, size=(64, 40)))
    assert isinstance(ei.value.raw_text, str) and ei.value.raw_text  # the random model's text came back
    log = log_path.read_text()
    assert log.count('"POST /v1/chat/completions HTTP/1.1" 200') == 1
    # transformers serve does not implement response_format: it ignores it (and says so in its log)
    assert "response_format" in log


def test_check_endpoint_against_transformers_serve(served):
    url, model, _ = served
    with RemotePolicy(url, model, api_key=None, retries=0) as pol:
        report = pol.check_endpoint()
    assert report["reachable"] is True
    # `transformers serve` lists only hub-cache models, not a local folder, so the model is "not listed"
    assert report["model_listed"] is False and model in report["error"]
