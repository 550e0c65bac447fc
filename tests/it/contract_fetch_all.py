"""The plain-loop Python client for JSON answers served in parts (docs/parts.md).

Usage: contract_fetch_all.py URL

Prints the reassembled answer at URL as JSON on standard output
(json.dumps with ensure_ascii=False, sort_keys=False): what a client
following the plain loop (ask part 1, 2, ... up to total_parts, join the
content strings, parse) gets from the server.

fetch_all below is that loop as clients of the format commonly write it,
with requests. It names no snapshot, so its later parts come from the
resource's latest snapshot, and it cannot reassemble a whole answer: when
is_consequential is false, content is the JSON object itself and
''.join(parts) raises TypeError. That case is handled outside the
function, in main, by asking once first.
"""

import sys

# --- the plain loop, as clients of the format write it --------------------
import requests, json

def fetch_all(url):
    parts = []
    for i in range(1, 10000):
        r = requests.get(url + ('&' if '?' in url else '?') + f'part={i}')
        r.raise_for_status()
        j = r.json()
        parts.append(j['content'])
        if not j.get('is_consequential') or i >= j.get('total_parts', i):
            break
    full = ''.join(parts)
    return json.loads(full)

# usage: obj = fetch_all('http://localhost:5000/llm/products?fields=id')
# --- end of the plain loop ------------------------------------------------


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    url = sys.argv[1]
    # A whole answer breaks the plain loop (see above): take its content
    # as it is; anything else goes through the loop.
    first = requests.get(url)
    first.raise_for_status()
    wrapper = first.json()
    if wrapper.get('is_consequential') is False:
        answer = wrapper['content']
    else:
        answer = fetch_all(url)
    print(json.dumps(answer, ensure_ascii=False, sort_keys=False))
    return 0


if __name__ == '__main__':
    sys.exit(main())
