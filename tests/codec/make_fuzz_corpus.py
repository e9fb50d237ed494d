#!/usr/bin/env python3
"""Write the seed corpora of fuzz_request, fuzz_response and fuzz_mrec from `kp_vectors dump`.

    make_fuzz_corpus.py KP_VECTORS OUTDIR      (OUTDIR: tests/fuzz/corpus)

One seed per API and kind, at the API's newest version (the one with the most fields), plus the
newest header version; each file is the 4-byte fuzz prefix (api key, version; big-endian; key -1
for headers) followed by the body. For fuzz_mrec, one seed per metadata record type and version:
the framed record value as it is (kp_mrec.h). Seeds larger than 2 KiB are skipped. Old seeds of
these three corpora are replaced.
"""

import os
import subprocess
import sys
import tempfile

KINDS = {"request": "request", "response": "response",
         "reqheader": "request", "respheader": "response", "record": "mrec"}
MAX_SEED = 2048


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tool, outdir = sys.argv[1], sys.argv[2]
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as tmp:
        subprocess.run([tool, "dump", tmp.name, "--seed", "1", "--count", "1"], check=True)
        lines = [ln.split(" ", 4) for ln in tmp.read().splitlines() if ln.strip()]
    newest = {}
    records = {}
    for key, kind, ver, hexb, _json in lines:
        if kind == "record":
            records[(int(key), int(ver))] = hexb
            continue
        k = (int(key), kind)
        if k not in newest or int(ver) > newest[k][0]:
            newest[k] = (int(ver), "" if hexb == "-" else hexb)
    for sub in set(KINDS.values()):
        d = os.path.join(outdir, sub)
        os.makedirs(d, exist_ok=True)
        for n in os.listdir(d):
            os.remove(os.path.join(d, n))
    count = 0
    for (key, kind), (ver, hexb) in sorted(newest.items()):
        body = bytes.fromhex(hexb)
        if len(body) > MAX_SEED:
            continue
        data = (key & 0xFFFF).to_bytes(2, "big") + ver.to_bytes(2, "big") + body
        name = ("header" if key < 0 else "api%d" % key) + "_v%d" % ver
        with open(os.path.join(outdir, KINDS[kind], name), "wb") as f:
            f.write(data)
        count += 1
    for (rtype, ver), hexb in sorted(records.items()):
        body = bytes.fromhex(hexb)
        if len(body) > MAX_SEED:
            continue
        with open(os.path.join(outdir, "mrec", "type%d_v%d" % (rtype, ver)), "wb") as f:
            f.write(body)
        count += 1
    print("wrote %d seeds" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
