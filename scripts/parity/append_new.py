#!/usr/bin/env python3
"""Appends newly added parity cases to `tests/data/parity.json` without re-recording the others.

PyTorch's results are deterministic for one PyTorch version on one kind of CPU, but not across
CPUs (NaN sign bits and payloads differ between its AVX2 and AVX-512 kernels). When cases are
added at the end of `record.py` on a host other than the one that recorded the file, record
into a scratch file and append only the cases past the recorded ones:

    PYTHONPATH=/path/to/torch-site python3 scripts/parity/record.py > /tmp/parity.json
    python3 scripts/parity/append_new.py tests/data/parity.json /tmp/parity.json > merged.json

Tensor references of the appended cases are renumbered into the recorded file's tensor pool.
"""

import json
import sys


def main(old_path, new_path):
    old = json.load(open(old_path))
    new = json.load(open(new_path))
    if old["torch"] != new["torch"]:
        sys.exit(f"PyTorch versions differ: {old['torch']} vs {new['torch']}")
    n = len(old["cases"])
    if [c["op"] for c in new["cases"][:n]] != [c["op"] for c in old["cases"]]:
        sys.exit("the recorded cases are not a prefix of the new ones: add cases at the end")
    pool = old["tensors"]
    index = {json.dumps(t, sort_keys=True): i for i, t in enumerate(pool)}

    def ref(i):
        if i is None:
            return None
        key = json.dumps(new["tensors"][i], sort_keys=True)
        if key not in index:
            index[key] = len(pool)
            pool.append(new["tensors"][i])
        return index[key]

    def remap(v):
        if isinstance(v, dict):
            return {
                k: ref(x) if k == "t" else [ref(i) for i in x] if k == "ts" else remap(x)
                for k, x in v.items()
            }
        if isinstance(v, list):
            return [remap(x) for x in v]
        return v

    for c in new["cases"][n:]:
        c = dict(c)
        c["args"] = remap(c["args"])
        if "kw" in c:
            c["kw"] = remap(c["kw"])
        for key in ("out", "up"):
            if key in c:
                c[key] = [ref(i) for i in c[key]]
        if "ref" in c:
            sys.exit("appending mpmath reference cases is not supported")
        old["cases"].append(c)
    json.dump(old, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
