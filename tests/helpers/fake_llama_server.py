"""A stand-in for llama.cpp's llama-server in the peer tests (no GPU build here): takes its command
line, prints a log like a Vulkan run's (FAKE_LLAMA_LOG replaces it), serves /health and /completion
with the reply shape of tests/helpers/llama_server_reply.json. Decode speeds cycle through
FAKE_LLAMA_SPEEDS (comma separated), one per /completion request; ignore_eos false stops early."""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
# lines of a real run's log (llama.cpp build 7e4c0a9 on an H100, bench/results/.../peer-qwen3-f16.json)
LOG = (
    "0.00.084.615 I cmn  common_param: common_params_print_info: build 1 (7e4c0a9) with GNU 11.4.0 for Linux x86_64\n"
    "0.00.084.705 I cmn  common_param:   - Vulkan0 : NVIDIA H100 80GB HBM3 (81559 MiB, 81062 MiB free)\n"
    "0.00.570.794 I llama_prepare_model_devices: using device Vulkan0 (NVIDIA H100 80GB HBM3) (0000:00:06.0)\n"
    "0.00.839.000 I load_tensors: offloaded 3/3 layers to GPU\n"
    "0.00.839.119 I load_tensors:      Vulkan0 model buffer size =     1.00 MiB\n"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("-m", required=True)
    a, _ = ap.parse_known_args()
    with open(os.path.join(HERE, "llama_server_reply.json")) as f:
        template = json.load(f)
    speeds = [float(s) for s in os.environ.get("FAKE_LLAMA_SPEEDS", "250").split(",")]
    served = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep the log file to the lines above
            pass

        def _reply(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._reply({"status": "ok"})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            rep = copy.deepcopy(template)
            t = rep["timings"]
            n = req["n_predict"] if req.get("ignore_eos") else min(3, req["n_predict"])
            speed = speeds[served[0] % len(speeds)]
            served[0] += 1
            t.update(
                prompt_n=len(req["prompt"]),
                predicted_n=n,
                predicted_per_second=speed,
                predicted_ms=1e3 * n / speed,
            )
            self._reply(rep)

    sys.stdout.write(os.environ.get("FAKE_LLAMA_LOG", LOG))
    sys.stdout.flush()
    ThreadingHTTPServer(("127.0.0.1", a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
