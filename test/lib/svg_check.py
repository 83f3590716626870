#!/usr/bin/env python3
"""What an ownership timeline of "pg_leader history --svg" shows, as JSON.

Parses the SVG (a parse error fails), renders it to PNG with rsvg-convert,
decodes the PNG with zlib alone, and prints the lanes (their holder texts),
the bars (data-* attributes, geometry, and the colour the PNG shows at the
bar's centre and at its fill attribute), the end markers by kind, and the
number of axis ticks.  test/t/133_client_history.pl compares that with the
server's history.

    test/lib/svg_check.py FILE.svg FILE.png
"""
import json
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib

NS = "{http://www.w3.org/2000/svg}"


def paeth(a, b, c):
    """The PNG Paeth predictor."""
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, "unexpected PNG format %r" % (hdr,)
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                line[x] = (line[x] + paeth(a, b, c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def main():
    svg, png = sys.argv[1], sys.argv[2]
    root = ET.parse(svg).getroot()
    subprocess.run(["rsvg-convert", "-f", "png", "-o", png, svg], check=True)
    w, h, px = decode_png(png)
    out = {"width": w, "height": h, "lanes": [], "bars": [], "markers": {}, "ticks": 0,
           "lanes_attr": int(root.get("data-lanes")), "periods_attr": int(root.get("data-periods")),
           "t0": float(root.get("data-t0")), "t1": float(root.get("data-t1")),
           "left": float(root.get("data-left")), "right": float(root.get("data-right"))}
    for el in root.iter():
        cls = el.get("class")
        if el.tag == NS + "text" and cls == "holder":
            out["lanes"].append(el.text)
        elif el.tag == NS + "rect" and cls == "period":
            x, y = float(el.get("x")), float(el.get("y"))
            bw, bh = float(el.get("width")), float(el.get("height"))
            cx, cy = int(x + bw / 2), int(y + bh / 2)
            fill = el.get("fill").lstrip("#")
            out["bars"].append({
                "token": el.get("data-token"), "holder": el.get("data-holder"),
                "state": el.get("data-state"), "lane": int(el.get("data-lane")),
                "start": el.get("data-start"), "end": el.get("data-end"),
                "x": x, "y": y, "width": bw, "height": bh,
                "fill": [int(fill[i:i + 2], 16) for i in (0, 2, 4)],
                "pixel": list(px[cy][cx]),
                "left_of_bar": list(px[cy][max(int(x) - 3, 0)]),
            })
        elif cls == "marker":
            k = el.get("data-kind")
            out["markers"][k] = out["markers"].get(k, 0) + 1
        elif cls == "tick":
            out["ticks"] += 1
    print(json.dumps(out))


main()
