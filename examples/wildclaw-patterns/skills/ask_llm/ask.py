"""Ask an OpenAI-compatible chat API one question (stdlib only, like many upstream skills)."""

import json
import os
import sys
import urllib.request

base = os.environ.get("OPENROUTER_BASE_URL", "https://openrouter.ai/api/v1").rstrip("/")
body = {
    "model": os.environ.get("JUDGE_MODEL", "openai/gpt-5.4"),
    "messages": [{"role": "user", "content": sys.argv[1]}],
}
request = urllib.request.Request(
    base + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={
        "Authorization": "Bearer " + os.environ["OPENROUTER_API_KEY"],
        "Content-Type": "application/json",
    },
)
with urllib.request.urlopen(request, timeout=60) as response:
    print(json.load(response)["choices"][0]["message"]["content"])
