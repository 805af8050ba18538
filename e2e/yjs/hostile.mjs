// Hostile Yjs input against the spawned server, with the unmodified `WebsocketProvider` of the
// npm `y-websocket` package as the people who must not be hurt by it. Driven by
// e2e/tests/hostile.rs.
//
// Usage: node hostile.mjs '<json>' where json is
//   { "mode": "gapped" | "large" | "awareness",
//     "server": "ws://127.0.0.1:PORT/api/yjs", "document": "<id>",
//     "origin": "http://127.0.0.1:PORT", "cookies": ["chopin_session=…", …] }
// - gapped: a writer's raw socket sends one 200 KB update whose client clock starts after a gap
//   (clocks 0–999 never sent); then a writer's provider types 50 characters one at a time. A
//   listening provider counts the bytes its socket is sent while they are typed.
// - large: a writer's raw socket sends a 3 MB text in 300 KB updates (past the 256 KiB source
//   limit: each is refused with y-protocols' permission-denied), and a writer's provider fills
//   a map until the document's Yjs state is over 2 MiB; then a fresh provider must sync it all.
// - awareness: 17 sockets of one signed-in reader each report 8 clients with 16 KB states; a
//   fresh provider must still sync and see someone present.
// Prints one JSON line with what it saw; exits non-zero on failure.

import WebSocket from 'ws';
import * as Y from 'yjs';
import { WebsocketProvider } from 'y-websocket';
import * as encoding from 'lib0/encoding';
import * as decoding from 'lib0/decoding';
import * as syncProtocol from 'y-protocols/sync';
import * as awarenessProtocol from 'y-protocols/awareness';

const config = JSON.parse(process.argv[2]);
const events = [];
const note = (what) => events.push(what);

function finish(ok, extra = {}) {
  console.log(JSON.stringify({ ok, events, ...extra }));
  process.exit(ok ? 0 : 1);
}
process.on('uncaughtException', (e) => finish(false, { error: `uncaught: ${e.stack || e}` }));
process.on('unhandledRejection', (e) => finish(false, { error: `unhandled: ${e}` }));
setTimeout(() => finish(false, { error: 'timed out' }), 90000).unref();

// What y-websocket's permission-denied handler says goes to console.warn: keep it.
const warnings = [];
console.warn = (...args) => warnings.push(args.join(' '));

/** `ws` with the browser's cookie and Origin; counts the bytes each socket is sent. */
const received = new Map();
function socketWith(cookie, name) {
  return class extends WebSocket {
    constructor(url, protocols) {
      super(url, protocols, { headers: { cookie, origin: config.origin }, maxPayload: 256 * 1024 * 1024 });
      this.addEventListener('message', (e) => {
        const n = e.data.byteLength ?? e.data.length ?? 0;
        received.set(name, (received.get(name) ?? 0) + n);
      });
      this.addEventListener('close', (e) => note(`${name} socket-close ${e.code}`));
    }
  };
}

function provider(name, cookie) {
  const doc = new Y.Doc();
  const p = new WebsocketProvider(config.server, config.document, doc, {
    WebSocketPolyfill: socketWith(cookie, name),
    disableBc: true,
  });
  p.on('connection-close', (e) => note(`${name} connection-close ${e ? e.code : 'local'}`));
  p.on('sync', (synced) => synced && note(`${name} synced`));
  return { name, doc, p, text: () => doc.getText('source').toString() };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, done, ms = 30000) {
  for (let waited = 0; !done(); waited += 20) {
    if (waited > ms) finish(false, { error: `waited ${ms} ms for ${what}`, received: Object.fromEntries(received), warnings });
    await sleep(20);
  }
}

/** A raw writer socket (no provider); resolves once open. Collects the frames it is sent. */
async function raw(cookie, name) {
  const ws = new (socketWith(cookie, name))(`${config.server}/${config.document}`);
  ws.binaryType = 'arraybuffer';
  ws.frames = [];
  ws.addEventListener('message', (e) => ws.frames.push(new Uint8Array(e.data)));
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  return ws;
}

function updateFrame(update) {
  const encoder = encoding.createEncoder();
  encoding.writeVarUint(encoder, 0);
  syncProtocol.writeUpdate(encoder, update);
  return encoding.toUint8Array(encoder);
}

/** The reasons of the permission-denied auth messages among `frames`. */
function denials(frames) {
  const reasons = [];
  for (const frame of frames) {
    const decoder = decoding.createDecoder(frame);
    if (decoding.readVarUint(decoder) !== 2) continue;
    if (decoding.readVarUint(decoder) !== 0) continue;
    reasons.push(decoding.readVarString(decoder));
  }
  return reasons;
}

if (config.mode === 'gapped') {
  const listener = provider('listener', config.cookies[0]);
  const writer = provider('writer', config.cookies[0]);
  await until('both synced', () => listener.p.synced && writer.p.synced);
  const hostileDoc = new Y.Doc();
  const text = hostileDoc.getText('source');
  text.insert(0, 'a'.repeat(1000));
  const sv = Y.encodeStateVector(hostileDoc);
  text.insert(1000, 'x'.repeat(200 * 1024));
  const gapped = Y.encodeStateAsUpdate(hostileDoc, sv);
  const attacker = await raw(config.cookies[0], 'attacker');
  attacker.send(updateFrame(gapped));
  // Told (or not: the caller checks) within a second.
  for (let waited = 0; waited < 1000 && denials(attacker.frames).length === 0; waited += 20) await sleep(20);
  await sleep(200);
  const before = received.get('listener') ?? 0;
  for (let i = 0; i < 50; i++) {
    const source = writer.doc.getText('source');
    source.insert(source.length, String.fromCharCode(97 + (i % 26)));
    await until(`keystroke ${i}`, () => listener.text().length === i + 1);
  }
  const keystrokeBytes = (received.get('listener') ?? 0) - before;
  attacker.close();
  finish(true, { keystrokeBytes, denied: denials(attacker.frames), text: listener.text() });
} else if (config.mode === 'large') {
  // A document whose Yjs state is over 2 MiB while its source stays small: a map of 30,000
  // entries of 100 bytes, set in transactions of 3,000. A fresh provider must sync all of it.
  const writer = provider('writer', config.cookies[0]);
  await until('the writer synced', () => writer.p.synced);
  const meta = writer.doc.getMap('meta');
  for (let batch = 0; batch < 10; batch++) {
    writer.doc.transact(() => {
      for (let i = 0; i < 3000; i++) meta.set(`k${batch}-${i}`, 'v'.repeat(100));
    });
    await sleep(50);
  }
  writer.doc.getText('source').insert(0, 'Small text\n');
  const state = Y.encodeStateAsUpdate(writer.doc).length;
  const fresh = provider('fresh', config.cookies[1] ?? config.cookies[0]);
  await until('a fresh provider synced everything', () =>
    fresh.p.synced && fresh.doc.getMap('meta').size === 30000 && fresh.text() === 'Small text\n', 60000);
  // Then a writer's raw socket types a 3 MB text in 300 KB updates: past the source limit,
  // each is refused (the first says why) and nobody is sent any of it.
  const attacker = await raw(config.cookies[0], 'attacker');
  const big = new Y.Doc();
  const source = big.getText('source');
  for (let i = 0; i < 10; i++) {
    const sv = Y.encodeStateVector(big);
    source.insert(source.length, `${i}`.repeat(300 * 1024));
    attacker.send(updateFrame(Y.encodeStateAsUpdate(big, sv)));
  }
  await until('the oversized text is refused', () => denials(attacker.frames).length > 0);
  await sleep(300);
  const refused = denials(attacker.frames);
  // A second fresh provider still syncs, and gets the small text only.
  const late = provider('late', config.cookies[1] ?? config.cookies[0]);
  await until('a late provider synced', () => late.p.synced && late.text() === 'Small text\n');
  attacker.close();
  finish(true, { refused, state, freshBytes: received.get('fresh') ?? 0, text: late.text() });
} else if (config.mode === 'awareness') {
  const crowd = [];
  for (let s = 0; s < 17; s++) {
    const ws = await raw(config.cookies[0], `crowd${s}`);
    const aw = new awarenessProtocol.Awareness(new Y.Doc());
    const states = new Map();
    for (let c = 0; c < 8; c++) states.set(s * 8 + c + 1000, { clock: 1, state: { name: 'y'.repeat(16000) } });
    const encoder = encoding.createEncoder();
    encoding.writeVarUint(encoder, 1);
    const update = encoding.createEncoder();
    encoding.writeVarUint(update, states.size);
    for (const [client, { clock, state }] of states) {
      encoding.writeVarUint(update, client);
      encoding.writeVarUint(update, clock);
      encoding.writeVarString(update, JSON.stringify(state));
    }
    encoding.writeVarUint8Array(encoder, encoding.toUint8Array(update));
    ws.send(encoding.toUint8Array(encoder));
    aw.destroy();
    crowd.push(ws);
  }
  await sleep(500);
  const fresh = provider('fresh', config.cookies[1] ?? config.cookies[0]);
  await until('a fresh provider synced', () => fresh.p.synced);
  await until('it sees someone present', () => fresh.p.awareness.getStates().size > 1);
  const present = fresh.p.awareness.getStates().size;
  await sleep(300);
  const closes = events.filter((e) => e.startsWith('fresh connection-close')).length;
  crowd.forEach((ws) => ws.close());
  finish(closes === 0, { present, closes, freshBytes: received.get('fresh') ?? 0 });
} else {
  finish(false, { error: `unknown mode ${config.mode}` });
}
