"""Reads a JSONSeq stream with a third-party SSE client (sseclient-py over
requests) and prints each event as a JSON line: id, event, data."""
import json
import sys

import requests
import sseclient

response = requests.get(sys.argv[1], stream=True, headers={"Accept": "text/event-stream"}, timeout=10)
response.raise_for_status()
for event in sseclient.SSEClient(response).events():
    print(json.dumps({"id": event.id, "event": event.event, "data": event.data}, ensure_ascii=False))
