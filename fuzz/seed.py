#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into fuzz/corpus/<target>/seed-*.

Seeds are valid inputs taken from the repository (the filter configurations of
envoy/, deploy/, docs/ and the configuration tests; descriptor YAML of the
limiter's tests; check and answer bodies; encoded RLS requests and answers).
The fuzzer grows the corpus from them and `make fuzz` minimizes it. Run once
(or after new examples appear): python3 fuzz/seed.py. Needs PyYAML only to read
the Envoy YAML files (skipped without it).
"""

import hashlib
import json
import pathlib
import re
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def write(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    (d / name).write_bytes(data)


def rust_raw_strings(text):
    """The r#"..."# literals of a Rust file."""
    return re.findall(r'r#"(.*?)"#', text, re.S)


def rust_strings(text):
    """The plain "..." literals of a Rust file, unescaped (simple escapes)."""
    out = []
    for m in re.finditer(r'(?<![#\w])"((?:[^"\\]|\\.)*)"', text, re.S):
        s = m.group(1)
        s = s.replace("\\n", "\n").replace('\\"', '"').replace("\\t", "\t").replace("\\\\", "\\")
        out.append(s)
    return out


def json_objects(texts):
    for t in texts:
        try:
            v = json.loads(t)
        except ValueError:
            continue
        if isinstance(v, dict):
            yield v


# ---------------------------------------------------------------- config

def configs():
    found = []
    tests = (ROOT / "crates/filter/src/config/tests.rs").read_text()
    for v in json_objects(rust_raw_strings(tests)):
        if "domain" in v:
            found.append(v)
        elif "key" in v and "limits" in v:
            found.append({"domain": "d", "rules": [v]})
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        for block in re.findall(r"```json\n(.*?)```", doc.read_text(), re.S):
            for v in json_objects([block]):
                if "rules" in v or "domain" in v:
                    found.append(v)
    try:
        import yaml
    except ImportError:
        yaml = None
    if yaml:
        for path in sorted(list((ROOT / "envoy").glob("*.yaml")) + list((ROOT / "deploy").rglob("*.yaml"))):
            try:
                docs = list(yaml.safe_load_all(path.read_text()))
            except Exception:
                continue
            stack = docs
            while stack:
                x = stack.pop()
                if isinstance(x, dict):
                    stack.extend(x.values())
                elif isinstance(x, list):
                    stack.extend(x)
                elif isinstance(x, str) and '"domain"' in x:
                    for v in json_objects([x]):
                        found.append(v)
    seen = set()
    for v in found:
        text = json.dumps(v, indent=1)
        if text not in seen:
            seen.add(text)
            write("config", text)
    return len(seen)


# ---------------------------------------------------------------- state

def states():
    n = 0
    # 24 bytes of limit, time and cost, then [version 1, algorithm tag, ...].
    for alg in range(6):
        for tail in (b"", b"\x00" * 8, b"\x00" * 16, b"\x01" * 24, b"\x00" * 40):
            head = bytes([alg, 2, 4, 4, 2, 0, 2, 0]) + struct.pack("<Q", 1_714_521_600 * 10**9)
            head += bytes([1]) + struct.pack("<Q", 1000)[:7]
            for tag in (alg, alg + 1):
                write("state", head + bytes([1, tag]) + tail)
                n += 1
    return n


# ---------------------------------------------------------------- key

def keys():
    seeds = [
        b"\x01\x18\x30client_ip\n198.51.100.7, 10.0.0.1\n10.0.0.1:443\n/api/x?u=1\nGET\nx-user: alice",
        b"\x00\x20\x80client_ip,header:x-user,path\n\n[2001:db8::1]:443\n/\nPOST\nx-user: bob",
        b"\x02\x20\x40client_ip,method,authority,query:u,const:v1\n::ffff:1.2.3.4, [2001:db8::2]:80, 3.3.3.3\n192.0.2.5:0\n/p?u=9&x\nPUT\n:authority: example.com",
        b"\x03\x10\x30client_ip\nfe80::1%eth0,unknown, 1.2.3.4:80 ,\n-\n/\nGET",
        b"\xff\x20\x80client_ip,header:x-forwarded-for\n1.1.1.1,2.2.2.2,3.3.3.3,4.4.4.4\n203.0.113.7:40000",
    ]
    for s in seeds:
        write("key", s)
    return len(seeds)


# ---------------------------------------------------------------- check / answer

CHECKS = [
    # concurrency limits, permits and charges: the same target reads them all
    '{"domain":"d","hits":2,"holder":7,"limits":[{"key":"c","algorithm":"concurrency","requests":5,"window_ms":30000},'
    '{"key":"g","algorithm":"gcra","requests":100,"window_ms":60000}]}',
    '{"domain":"d","holder":7,"ttl_ms":30000,"release":[{"key":"c/0/a","hits":1}],"renew":["c/0/b"]}',
    '{"domain":"d","limits":[{"key":"t","algorithm":"token_bucket","requests":10,"window_ms":1000,"burst":10,"charge":15},'
    '{"key":"f","algorithm":"fixed_window","requests":10,"window_ms":1000,"refund":5,"refund_age_ms":200}]}',
    '{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":1,"window_ms":1}]}',
    '{"domain":"d","hits":2,"limits":[{"key":"a","algorithm":"gcra","requests":10,"window_ms":1000,"burst":1,"max_delay_ms":1000},'
    '{"key":"b","algorithm":"leaky_bucket","requests":10,"window_ms":1000,"hits":5,"max_delay_ms":0},'
    '{"key":"c","algorithm":"fixed_window","requests":10,"window_ms":1000}]}',
    '{"domain":"d","batch":7,"limits":[{"key":"k","algorithm":"sliding_window","requests":5,"window_ms":60000,"precision":4,"soft_percent":10}]}',
    '{"domain":"d","limits":[{"key":"k","algorithm":"gcra","requests":10,"window_ms":1000,"lease":5,"returned":2,"returned_age_ms":10}]}',
    '{"domain":"d.e-f_g","limits":[{"key":"k","algorithm":"token_bucket","requests":3,"window_ms":3600000,"burst":9},'
    '{"key":"l","algorithm":"sliding_log","requests":4,"window_ms":10}]}',
    '{"domain":"demo","hits":1,"limits":[{"key":"per-ip/0/203.0.113.7","algorithm":"gcra","requests":100,"window_ms":60000,"burst":20}]}',
]

ANSWERS = [
    ('{"allowed":true,"limits":[]}', 0),
    ('{"allowed":false,"limits":[{"allowed":false,"limit":100,"remaining":0,"reset_ms":540,"retry_after_ms":600}]}', 1),
    ('{"allowed":true,"limits":[{"allowed":true,"limit":10,"remaining":3,"reset_ms":1,"retry_after_ms":0,"delay_ms":5,"leased":2},'
     '{"allowed":true,"limit":1,"remaining":0,"reset_ms":0,"retry_after_ms":0}]}', 2),
    ('{"allowed":false,"limits":[{"allowed":true,"limit":10,"remaining":0,"reset_ms":9,"retry_after_ms":0}],"admitted":3,"delays_ms":[0,1,18446744073709551615]}', 1),
    ('{"allowed":true,"limits":[{"allowed":true,"limit":10,"remaining":0,"reset_ms":9,"retry_after_ms":0}],"admitted":4}', 1),
    ('{ "allowed": true, "limits": [ ] }', 0),
]


def checks():
    for c in CHECKS:
        write("check", c)
    n = 0
    for body, limits in ANSWERS:
        for requests in (1, 4, 7):
            write("answer", bytes([limits | requests << 2]) + body.encode())
            n += 1
    return n


# ---------------------------------------------------------------- protobuf

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(field, n):
    return varint(field << 3) + varint(n)


def field_bytes(field, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(field << 3 | 2) + varint(len(data)) + data


def status(code, limit=None, unit=None, remaining=0, reset=None):
    out = field_varint(1, code)
    if limit is not None:
        out += field_bytes(2, field_varint(1, limit) + field_varint(2, unit) + field_bytes(3, "name"))
    if remaining:
        out += field_varint(3, remaining)
    if reset is not None:
        out += field_bytes(4, field_varint(1, reset[0]) + field_varint(2, reset[1]))
    return out


def rls_answers():
    answers = [
        (1, [status(1, 10, 2, 9, (30, 0))]),
        (2, [status(2, 10, 1, 0, (0, 500_000_000)), status(1, 5, 3, 4, (100, 1))]),
        (1, []),
        (1, [status(1), status(1, 0, 0, 4294967295)]),
        (2, [status(2, 1, 7, 0, (604800, 0)), status(1, 3, 5), status(1, 2, 6, 1, (2**63 - 1, 999_999_999))]),
    ]
    for overall, statuses in answers:
        body = field_varint(1, overall) + b"".join(field_bytes(2, s) for s in statuses)
        write("rls_answer", bytes([len(statuses)]) + body)
    return len(answers)


def descriptor(entries, limit=None, hits=None, negative=False):
    out = b"".join(field_bytes(1, field_bytes(1, k) + field_bytes(2, v)) for k, v in entries)
    if limit:
        out += field_bytes(2, field_varint(1, limit[0]) + field_varint(2, limit[1]))
    if hits is not None:
        out += field_bytes(3, field_varint(1, hits))
    if negative:
        out += field_varint(4, 1)
    return out


def rls_requests():
    requests = [
        ("edge", [descriptor([("remote_address", "10.0.0.1")])], 0),
        ("edge", [descriptor([("remote_address", "50.0.0.5")])], 1),
        ("edge", [descriptor([("user", "u1")]), descriptor([("vip", "yes"), ("user", "u1")])], 0),
        ("edge", [descriptor([("internal", "x")]), descriptor([("canary", "c")]), descriptor([("placeholder", "p")])], 2),
        ("edge", [descriptor([("bucket", "b")], hits=3), descriptor([("path", "/api/v1"), ("method", "GET")])], 0),
        ("edge", [descriptor([("remote_address", "10.0.0.1")], limit=(5, 1)), descriptor([("user", "u")], limit=(0, 2))], 0),
        ("edge", [descriptor([("remote_address", "10.0.0.1")], negative=True, hits=1)], 0),
        ("other", [descriptor([("remote_address", "10.0.0.1")])], 0),
        ("edge", [descriptor([("remote_address", "10.0.0.1")])] * 3, 4),
    ]
    for domain, descs, hits in requests:
        body = field_bytes(1, domain) + b"".join(field_bytes(2, d) for d in descs)
        if hits:
            body += field_varint(3, hits)
        write("rls_request", body)
    return len(requests)


# ---------------------------------------------------------------- descriptor YAML

def yamls():
    texts = []
    sources = sorted((ROOT / "crates/limiter/src/rls/config").glob("*.rs"))
    for path in [*sources, ROOT / "crates/limiter/tests/rls.rs", ROOT / "fuzz/src/rls_request.rs"]:
        src = path.read_text()
        for s in rust_raw_strings(src) + rust_strings(src):
            if "domain:" in s and "descriptors" in s:
                texts.append(s)
    for path in (ROOT / "tests").glob("test_rls*.py"):
        src = path.read_text()
        for s in re.findall(r'"""(.*?)"""', src, re.S):
            if "domain:" in s and "descriptors" in s:
                texts.append(s)
    for t in texts:
        write("rls_yaml", t)
    return len(set(texts))


# ---------------------------------------------------------------- cost_extract

def cost_extracts():
    """OpenAI-style bodies: a completion, and its stream with usage last.
    The first byte: bit 0 an event stream, bit 1 the second path set."""
    usage = {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1741570283,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi \"usage\""},
                         "finish_reason": "stop"}], "usage": usage}
    chunk = {"id": "c1", "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": {"content": "Hi"}}], "usage": None}
    last = {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    stream = "".join(f"data: {json.dumps(e)}\n\n" for e in (chunk, chunk, last)) + "data: [DONE]\n\n"
    seeds = [
        b"\x00" + json.dumps(body).encode(),
        b"\x00" + json.dumps(body, indent=2).encode(),
        b"\x02" + json.dumps({"a": {"b": 7, "b": {"c": {"d": {"e": {"f": {"g": {"h": 8}}}}}}}}).encode(),
        b"\x01" + stream.encode(),
        b"\x01" + (": ping\r\n\r\nevent: m\r\nid: 1\r\ndata: {\"usage\":\r\ndata: {\"total_tokens\": 5}}\r\n\r\n"
                   "data: [DONE]\r\n\r\n").encode(),
        b"\x03" + b"data: {\"a\":{\"b\":1}}\rdata: {\"a\":null}\r\r",
    ]
    for s in seeds:
        write("cost_extract", s)
    return len(seeds)


# ---------------------------------------------------------------- pattern

def patterns():
    """Regular expressions of the docs and the configuration examples, and a
    few of each construct, each with values (NUL-separated)."""
    found = set()
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        for m in re.finditer(r'"(?:path_regex|regex)":\s*"((?:[^"\\]|\\.)*)"', doc.read_text()):
            found.add(json.loads(f'"{m.group(1)}"'))
    found.update([
        "Bearer (.+)", "(a+)+b", "(?i)ab[^c-e]", "(a|ab)(c|bcd)(d*)", "(a*?)(a{2,3})?", "[]a-]|[^\\d\\s]",
        "x{2}y{1,}z{0,2}?", "(?:(a)|b)*$", "^\\.\\w\\W\\S\\D\\t", "(?i:x)(?-i)y", "é.[à-ÿ]",
    ])
    values = ["", "a", "ab", "aab", "Bearer x.y", "/api/v1/users/7", "ABD", "abcd", "xxyyz", "é\nà"]
    for p in sorted(found):
        write("pattern", "\0".join([p] + values))
    return len(found)


if __name__ == "__main__":
    counts = {
        "config": configs(),
        "state": states(),
        "key": keys(),
        "check+answer": checks(),
        "rls_answer": rls_answers(),
        "rls_request": rls_requests(),
        "rls_yaml": yamls(),
        "cost_extract": cost_extracts(),
        "pattern": patterns(),
    }
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
