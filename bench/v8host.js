// A proxy-wasm 0.2.1 host in Node's V8: loads a filter module, configures
// it, and drives requests through it with in-memory host calls (headers,
// the `source.address` property, shared data with compare-and-swap, a
// clock 20 µs apart per read, shared queues, and HTTP calls answered at
// once, each as a check whose every limit allows and grants the lease it
// asks for). Outside Envoy, it shows what the module's own code costs in
// V8 and where (`node --cpu-prof` names every wasm function of `make
// wasm-profiling`'s build), and which host calls one request makes.
//
//   node --no-liftoff --no-wasm-lazy-compilation bench/v8host.js MODULE
//        [--config FILE] [--requests N] [--rounds R] [--calls]
//        [--calls-with CALL] [--lines] [--probes] [--probes-with CALL]
//
// Without --config, the `local-gcra` row's configuration. --calls prints
// the host calls of one request (after 1,000) as JSON and stops;
// --calls-with CALL, those of the first request after them that makes
// CALL, with what its root does for it (a lease renewal's wake-up, its
// call and answer); --lines, for a module `bench/memlines.py`
// instrumented, the 64-byte lines of the module's memory one request
// touches (stack, static data, heap); --probes, for a module
// `bench/codelines.py` instrumented, the stretches of code one request
// runs; --probes-with CALL, those of the first request that makes CALL,
// with what its root does for it; --pushes N, the module's memory in bytes
// before and after N configuration pushes (each a new root configured and
// the old one deleted, then ten requests). Otherwise each round prints the
// CPU µs per request.
'use strict';
const fs = require('fs');

const LOCAL_GCRA = {
  domain: 'bench', client_ip: {xff_trusted_hops: 1},
  rules: [{name: 'per-ip', key: ['client_ip'], limits: [{algorithm: 'gcra', requests: 1000, window: '10ms'}]}],
};
// As wrk sends them in the bench, behind one trusted proxy.
const REQUEST = [[':method', 'GET'], [':path', '/'], [':authority', 'bench'],
  ['x-forwarded-for', '198.51.100.1'], ['user-agent', 'wrk']];
const RESPONSE = [[':status', '200'], ['content-length', '2']];
const CALL_RESPONSE = [[':status', '200'], ['content-type', 'application/json']];
const SOURCE = '10.0.0.1:40000';
// proxy-wasm 0.2.1 codes
const OK = 0, NOT_FOUND = 1, EMPTY = 7, CAS_MISMATCH = 8;
const PLUGIN_CONFIGURATION = 7, CALL_RESPONSE_BODY = 4;
const REQUEST_HEADERS = 0, RESPONSE_HEADERS = 2, CALL_RESPONSE_HEADERS = 6;
// The root context's id, and the one shared queue's.
const ROOT = 1, QUEUE = 1;
// Context ids of the roots a push creates (requests take theirs from 2 up).
const PUSHED_ROOTS = 1 << 30;

function args(argv) {
  const a = {module: null, config: null, requests: 100000, rounds: 3, calls: false, lines: false, probes: false, until: null, pushes: 0};
  for (let i = 0; i < argv.length; i++) {
    const v = argv[i];
    if (v === '--config') a.config = argv[++i];
    else if (v === '--requests') a.requests = Number(argv[++i]);
    else if (v === '--rounds') a.rounds = Number(argv[++i]);
    else if (v === '--calls') a.calls = true;
    else if (v === '--calls-with') { a.calls = true; a.until = argv[++i]; }
    else if (v === '--lines') a.lines = true;
    else if (v === '--probes') a.probes = true;
    else if (v === '--probes-with') { a.probes = true; a.until = argv[++i]; }
    else if (v === '--pushes') a.pushes = Number(argv[++i]);
    else a.module = v;
  }
  if (!a.module) throw new Error('usage: v8host.js MODULE [--config FILE] [--requests N] [--rounds R] [--calls] [--calls-with CALL] [--lines] [--probes] [--probes-with CALL] [--pushes N]');
  return a;
}

class Host {
  constructor(config) {
    this.config = Buffer.from(config);
    this.maps = {[REQUEST_HEADERS]: REQUEST, [RESPONSE_HEADERS]: RESPONSE, [CALL_RESPONSE_HEADERS]: CALL_RESPONSE};
    this.queued = 0;
    this.answers = new Map(); // call token -> answer body, in call order
    this.built = new Map(); // check body -> its answer
    this.answering = null;
    this.token = 0;
    this.shared = new Map();
    this.clock = 1700000000n * 1000000000n;
    this.calls = null;
    this.lines = null;
    this.metrics = 0;
    this.root = ROOT;
  }

  bytes() { return new Uint8Array(this.instance.exports.memory.buffer); }
  view() { return new DataView(this.instance.exports.memory.buffer); }
  text(ptr, len) { return Buffer.from(this.instance.exports.memory.buffer, ptr, len).toString('latin1'); }
  note(call) { if (this.calls) this.calls.push(call); }

  // Hands `buf` to the module in memory it allocates, as Envoy does.
  give(buf, retPtr, retSize) {
    const ptr = this.instance.exports.malloc(buf.length);
    this.bytes().set(buf, ptr);
    const v = this.view();
    v.setUint32(retPtr, ptr, true);
    v.setUint32(retSize, buf.length, true);
    return OK;
  }

  imports() {
    const h = this;
    const env = {
      proxy_log: () => OK,
      proxy_get_buffer_bytes: (type, start, max, rp, rs) => {
        if (type === CALL_RESPONSE_BODY) h.note('buffer');
        const buffer = type === PLUGIN_CONFIGURATION ? h.config
          : type === CALL_RESPONSE_BODY ? h.answering : Buffer.alloc(0);
        return h.give(buffer, rp, rs);
      },
      proxy_register_shared_queue: (np, ns, rp) => { h.view().setUint32(rp, QUEUE, true); return OK; },
      proxy_enqueue_shared_queue: () => { h.note('enqueue'); h.queued++; return OK; },
      proxy_dequeue_shared_queue: (queue, rp, rs) => {
        h.note('dequeue');
        if (h.queued === 0) return EMPTY;
        h.queued--;
        return h.give(Buffer.from('.'), rp, rs);
      },
      proxy_http_call: (up, us, hp, hs, bp, bs, tp, ts, timeout, tokenPtr) => {
        h.note('http_call');
        h.token++;
        h.view().setUint32(tokenPtr, h.token, true);
        // The same checks come again: their answers are built once.
        const check = h.text(bp, bs);
        if (!h.built.has(check)) h.built.set(check, answer(check));
        h.answers.set(h.token, h.built.get(check));
        return OK;
      },
      proxy_get_header_map_value: (map, kp, ks, rp, rs) => {
        h.note('header');
        const name = h.text(kp, ks);
        const found = (h.maps[map] || []).find(e => e[0] === name);
        return found ? h.give(Buffer.from(found[1]), rp, rs) : NOT_FOUND;
      },
      proxy_get_header_map_pairs: (map, rp, rs) => {
        h.note('headers');
        const pairs = h.maps[map] || [];
        const head = Buffer.alloc(4 + 8 * pairs.length);
        head.writeUInt32LE(pairs.length, 0);
        pairs.forEach(([k, v], i) => {
          head.writeUInt32LE(k.length, 4 + 8 * i);
          head.writeUInt32LE(v.length, 8 + 8 * i);
        });
        const body = pairs.map(([k, v]) => Buffer.from(`${k}\0${v}\0`));
        return h.give(Buffer.concat([head, ...body]), rp, rs);
      },
      proxy_add_header_map_value: () => { h.note('add_header'); return OK; },
      proxy_replace_header_map_value: () => { h.note('replace_header'); return OK; },
      proxy_remove_header_map_value: () => { h.note('remove_header'); return OK; },
      proxy_get_property: (pp, ps, rp, rs) => {
        h.note('property');
        return h.text(pp, ps) === 'source\0address' ? h.give(Buffer.from(SOURCE), rp, rs) : NOT_FOUND;
      },
      proxy_get_shared_data: (kp, ks, rp, rs, casPtr) => {
        h.note('get');
        const entry = h.shared.get(h.text(kp, ks));
        if (!entry) return NOT_FOUND;
        h.give(entry.value, rp, rs);
        h.view().setUint32(casPtr, entry.cas, true);
        return OK;
      },
      proxy_set_shared_data: (kp, ks, vp, vs, cas) => {
        h.note('set');
        const key = h.text(kp, ks);
        const entry = h.shared.get(key);
        if (cas !== 0 && entry && entry.cas !== cas) return CAS_MISMATCH;
        const value = Buffer.from(h.bytes().slice(vp, vp + vs));
        h.shared.set(key, {value, cas: ((entry ? entry.cas : 0) % 0xffffffff) + 1});
        return OK;
      },
      proxy_get_current_time_nanoseconds: (rp) => {
        h.note('now');
        h.clock += 20000n;
        h.view().setBigUint64(rp, h.clock, true);
        return OK;
      },
      proxy_define_metric: (type, np, ns, rp) => { h.view().setUint32(rp, ++h.metrics, true); return OK; },
      proxy_increment_metric: () => { h.note('increment_metric'); return OK; },
      proxy_record_metric: () => { h.note('record_metric'); return OK; },
      proxy_send_local_response: () => { h.note('send_local_response'); return OK; },
    };
    // Any other call: noted by its name without `proxy_`, and answered OK.
    // What `bench/memlines.py` instruments a module with: each load and
    // store, and each bulk copy and fill, reported before it is made.
    const touch = (address, size) => {
      if (!h.lines) return;
      for (let l = address >>> 6; l <= (address + Math.max(size, 1) - 1) >>> 6; l++) h.lines.add(l);
    };
    env.load_ptr = (id, size, offset, address) => { touch(address + offset, size); return address; };
    env.store_ptr = (id, size, offset, address) => { touch(address + offset, size); return address; };
    for (const t of ['i32', 'i64', 'f32', 'f64']) env['load_val_' + t] = env['store_val_' + t] = (id, v) => v;
    env.sluice_copy = (dst, src, len) => { touch(dst, len); touch(src, len); h.bytes().copyWithin(dst, src, src + len); };
    env.sluice_fill = (dst, value, len) => { touch(dst, len); h.bytes().fill(value, dst, dst + len); };
    // What `bench/codelines.py` instruments a module with: the start of
    // each stretch of straight-line code, reported when it runs.
    env.sluice_probe = (id) => { if (h.probes) h.probes.add(id); };
    const others = new Proxy(env, {get: (o, name) => o[name] || (() => { h.note(String(name).replace(/^proxy_/, '')); return OK; })});
    return {env: others, wasi_snapshot_preview1: {random_get: (p, l) => { h.bytes().fill(7, p, p + l); return OK; }}};
  }

  load(path) {
    this.instance = new WebAssembly.Instance(new WebAssembly.Module(fs.readFileSync(path)), this.imports());
    const x = this.instance.exports;
    if (x._initialize) x._initialize();
    x.proxy_on_context_create(ROOT, 0);
    x.proxy_on_vm_start(ROOT, 0);
    if (!x.proxy_on_configure(ROOT, this.config.length)) throw new Error('the module refused the configuration');
    this.next = 2;
  }

  // One request's life as Envoy calls it; what the filter left its root
  // (a wake-up through the queue, calls) is done after each callback.
  request() {
    const x = this.instance.exports;
    const c = this.next++;
    x.proxy_on_context_create(c, this.root);
    x.proxy_on_request_headers(c, REQUEST.length, 1);
    this.settle();
    x.proxy_on_response_headers(c, RESPONSE.length, 0);
    this.settle();
    x.proxy_on_log(c);
    x.proxy_on_done(c);
    x.proxy_on_delete(c);
  }

  // A configuration push as Envoy makes it: a new root in the same VM,
  // configured, then the one it replaces done and deleted.
  push(n) {
    const x = this.instance.exports;
    const fresh = PUSHED_ROOTS + n;
    x.proxy_on_context_create(fresh, 0);
    if (!x.proxy_on_configure(fresh, this.config.length)) throw new Error('the module refused the configuration');
    const old = this.root;
    this.root = fresh;
    x.proxy_on_done(old);
    x.proxy_on_delete(old);
    this.settle();
  }

  // Runs the root woken through the queue, then answers every call made,
  // to the root context as Envoy does (the SDK routes each to its caller),
  // until none is left.
  settle() {
    const x = this.instance.exports;
    while (this.queued > 0 || this.answers.size > 0) {
      if (this.queued > 0) x.proxy_on_queue_ready(this.root, QUEUE);
      for (const [token, body] of this.answers) {
        this.answers.delete(token);
        this.answering = body;
        x.proxy_on_http_call_response(this.root, token, CALL_RESPONSE.length, body.length, 0);
      }
    }
  }
}

// The limiter's answer to the check `body`: every limit allows, with the
// units of the lease it asks for granted.
function answer(body) {
  const check = JSON.parse(body);
  const limits = (check.limits || []).map(l => ({
    allowed: true, limit: l.requests, remaining: Math.max(l.requests - 1, 0), reset_ms: 1,
    retry_after_ms: 0, ...(l.lease ? {leased: l.lease} : {}),
  }));
  return Buffer.from(JSON.stringify({allowed: true, limits}));
}

// Runs one request, or with `until` requests until one makes that host
// call (an error if none of 10,000 does); `fresh` resets what the caller
// records before each. `host.calls` holds the last request's calls.
function requestMaking(host, until, fresh) {
  for (let i = 0; i < 10000; i++) {
    fresh();
    host.calls = [];
    host.request();
    if (until === null || host.calls.includes(until)) return;
  }
  throw new Error(`no request made ${until}`);
}

function main() {
  const a = args(process.argv.slice(2));
  const config = a.config ? fs.readFileSync(a.config, 'utf8') : JSON.stringify(LOCAL_GCRA);
  const host = new Host(config);
  host.load(a.module);
  const tick = () => host.instance.exports.proxy_on_tick(host.root);
  for (let i = 0; i < 1000; i++) host.request();
  tick();
  if (a.probes) {
    requestMaking(host, a.until, () => { host.probes = new Set(); });
    console.log(JSON.stringify([...host.probes]));
    return;
  }
  if (a.lines) {
    // The stack is below the static data, which starts at 1 MiB, and the
    // heap above `__heap_base`.
    const heap = host.instance.exports.__heap_base.value;
    host.lines = new Set();
    host.request();
    const lines = [...host.lines];
    host.lines = null;
    const stack = lines.filter(l => l * 64 < 1048576).length;
    const data = lines.filter(l => l * 64 >= 1048576 && l * 64 < heap).length;
    console.log(JSON.stringify({lines: lines.length, stack, data, heap: lines.length - stack - data}));
    return;
  }
  if (a.pushes) {
    // The module's memory before and after the pushes, each followed by
    // ten requests and a tick under the new root.
    const bytes = () => host.instance.exports.memory.buffer.byteLength;
    const before = bytes();
    for (let n = 1; n <= a.pushes; n++) {
      host.push(n);
      for (let i = 0; i < 10; i++) host.request();
      tick();
    }
    console.log(JSON.stringify({pushes: a.pushes, before, after: bytes()}));
    return;
  }
  if (a.calls) {
    requestMaking(host, a.until, () => {});
    console.log(JSON.stringify(host.calls));
    return;
  }
  for (let r = 0; r < a.rounds; r++) {
    const start = process.cpuUsage();
    for (let i = 1; i <= a.requests; i++) {
      host.request();
      if (i % 1000 === 0) tick();
    }
    const used = process.cpuUsage(start);
    console.log(`${((used.user + used.system) / a.requests).toFixed(3)} µs per request`);
  }
}

main();
