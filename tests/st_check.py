#!/usr/bin/env python3
# An independent safetensors reader (json + struct only) for test_safetensors_write: checks the
# layout of FILE field by field and that tensor i holds values v[j] = i + 0.25 * j (f32).
import json, struct, sys

path = sys.argv[1]
want = json.loads(sys.argv[2])  # [[name, [shape...]], ...] in file order
data = open(path, "rb").read()
(n,) = struct.unpack("<Q", data[:8])
assert n % 8 == 0, "header length %d is not a multiple of 8" % n
hdr = json.loads(data[8 : 8 + n].decode("utf-8"))
assert hdr.pop("__metadata__") == {"format": "pt"}
body = data[8 + n :]
assert list(hdr.keys()) == [w[0] for w in want], list(hdr.keys())
off = 0
for i, (name, shape) in enumerate(want):
    e = hdr[name]
    assert e["dtype"] == "F32" and e["shape"] == shape, e
    count = 1
    for d in shape:
        count *= d
    assert e["data_offsets"] == [off, off + 4 * count], e
    vals = struct.unpack("<%df" % count, body[off : off + 4 * count])
    for j, v in enumerate(vals):
        assert v == struct.unpack("<f", struct.pack("<f", i + 0.25 * j))[0], (name, j, v)
    off += 4 * count
assert off == len(body), "%d data bytes, tensors hold %d" % (len(body), off)
print("ok", len(want), "tensors")
