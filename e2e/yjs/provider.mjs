// The unmodified `WebsocketProvider` of the npm `y-websocket` package against Chopin's text
// endpoint, under Node with `ws`, exactly as docs/room-socket.md tells a client author to set it
// up. Driven by e2e/tests/yjs_provider.rs.
//
// Usage: node provider.mjs '<json>' where json is
//   { "mode": "edit" | "idle" | "refused" | "poison",
//     "server": "ws://127.0.0.1:PORT/api/yjs", "document": "<id>",
//     "origin": "http://127.0.0.1:PORT", "cookies": ["chopin_session=…", …],
//     "idleMs": 130000 }
// - edit: the first cookie's provider types into the text; every provider sees the same text
//   and every other one's awareness.
// - idle: one provider alone, idle for `idleMs` of its own clock (fake timers: Date and the
//   timers y-websocket and y-protocols use run fast), must stay connected: no reconnect.
// - refused: one provider whose connection the server refuses; it must stop retrying.
// - poison: a writer's raw socket sends `poison` (hex updates that used to poison a document);
//   no provider may be sent bytes the official yjs cannot apply, and editing goes on.
// Prints one JSON line with what it saw; exits non-zero on failure. Any uncaught exception fails.

import WebSocket from 'ws';
import FakeTimers from '@sinonjs/fake-timers';

const config = JSON.parse(process.argv[2]);
const realSetTimeout = globalThis.setTimeout;
// The providers' own clock (Date, and the timers y-websocket and y-protocols start: the 30 s
// watchdog, the 15 s awareness renewals, the reconnect backoff) is a fake one this script
// advances, so minutes of it pass in a second or two. Installed before any provider exists, so
// every one of their timers is on it. The server's answers still travel over real sockets.
const clock = FakeTimers.install({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
// Imported only now: lib0 keeps `Date.now` as it finds it when first loaded.
const Y = await import('yjs');
const { WebsocketProvider } = await import('y-websocket');
const events = [];
const note = (what) => events.push(what);

function finish(ok, extra = {}) {
  console.log(JSON.stringify({ ok, events, ...extra }));
  process.exit(ok ? 0 : 1);
}
process.on('uncaughtException', (e) => finish(false, { error: `uncaught: ${e.stack || e}` }));
process.on('unhandledRejection', (e) => finish(false, { error: `unhandled: ${e}` }));
const deadline = realSetTimeout(() => finish(false, { error: 'timed out' }), 60000);
deadline.unref();

/** `ws` with the browser's cookie and Origin: what a page on APP_ORIGIN sends by itself. */
function socketWith(cookie) {
  return class extends WebSocket {
    constructor(url, protocols) {
      super(url, protocols, { headers: { cookie, origin: config.origin } });
    }
  };
}

function provider(name, cookie) {
  const doc = new Y.Doc();
  const p = new WebsocketProvider(config.server, config.document, doc, {
    WebSocketPolyfill: socketWith(cookie),
    disableBc: true,
  });
  p.awareness.setLocalState({ user: name });
  p.on('status', (e) => note(`${name} ${e.status}`));
  p.on('connection-close', (e) => note(`${name} connection-close ${e ? e.code : 'local'}`));
  p.on('connection-error', () => note(`${name} connection-error`));
  p.on('closed', (e) => note(`${name} closed ${e.code} ${e.reason}`));
  p.on('sync', (synced) => synced && note(`${name} synced`));
  return { name, doc, p, text: () => doc.getText('source').toString() };
}

const sleep = (ms) => new Promise((r) => realSetTimeout(r, ms));
async function until(what, done, ms = 15000) {
  for (let waited = 0; !done(); waited += 20) {
    if (waited > ms) finish(false, { error: `waited ${ms} ms for ${what}` });
    await sleep(20);
  }
}
const count = (word) => events.filter((e) => e.includes(word)).length;

if (config.mode === 'edit') {
  const all = config.cookies.map((c, i) => provider(`p${i}`, c));
  await until('every provider synced', () => all.every((x) => x.p.synced));
  all[0].doc.getText('source').insert(0, 'Hello from y-websocket\n');
  await until('every provider has the text', () => all.every((x) => x.text() === 'Hello from y-websocket\n'));
  await until('every provider sees the others', () =>
    all.every((x) => all.every((y) => x === y || [...x.p.awareness.getStates().values()].some((s) => s.user === y.name))));
  finish(true, { texts: all.map((x) => x.text()) });
} else if (config.mode === 'poison') {
  // A writer's raw socket sends updates that used to poison a document (`config.poison`, hex),
  // as y-websocket sync update frames; the providers must never receive bytes that make the
  // official `Y.applyUpdate` throw, and the document must go on syncing.
  const all = config.cookies.map((c, i) => provider(`p${i}`, c));
  await until('every provider synced', () => all.every((x) => x.p.synced));
  const raw = new (socketWith(config.cookies[0]))(`${config.server}/${config.document}`);
  raw.binaryType = 'arraybuffer';
  await new Promise((resolve, reject) => { raw.onopen = resolve; raw.onerror = reject; });
  for (const hex of config.poison) {
    const bytes = Uint8Array.from(hex.match(/../g).map((b) => parseInt(b, 16)));
    const lengthBytes = [];
    for (let n = bytes.length; ; n >>>= 7) {
      if (n < 0x80) { lengthBytes.push(n); break; }
      lengthBytes.push((n & 0x7f) | 0x80);
    }
    raw.send(Uint8Array.from([0, 2, ...lengthBytes, ...bytes]));
  }
  await sleep(300);
  all[0].doc.getText('source').insert(0, 'Still here\n');
  await until('every provider has the text', () => all.every((x) => x.text().startsWith('Still here\n')));
  // A provider that opens the document afterwards still syncs it: nothing poisoned it.
  const late = provider('late', config.cookies[0]);
  await until('a late provider synced', () => late.p.synced && late.text().startsWith('Still here\n'));
  raw.close();
  finish(true, { texts: all.map((x) => x.text()) });
} else if (config.mode === 'idle') {
  const alone = provider('alone', config.cookies[0]);
  await until('synced', () => alone.p.synced);
  // 1 s of the provider's clock per 10 ms of real time.
  for (let s = 0; s < config.idleMs / 1000; s++) {
    clock.tick(1000);
    await sleep(10);
  }
  const connected = alone.p.wsconnected;
  const closes = count('connection-close');
  finish(connected && closes === 0, { connected, closes });
} else if (config.mode === 'refused') {
  const refused = provider('refused', config.cookies[0] ?? '');
  await until('the server closed it', () => count('closed') > 0);
  // y-websocket backs off at most 2.5 s between attempts; give it three times that.
  for (let s = 0; s < 8; s++) {
    clock.tick(1000);
    await sleep(20);
  }
  // One connection, one close: a provider that retried would have closed again.
  const attempts = count('refused connection-close');
  finish(attempts === 1 && !refused.p.shouldConnect, { attempts, shouldConnect: refused.p.shouldConnect });
} else if (config.mode === 'reopen') {
  // A provider is open when the document is archived (4404, final), then restored: a new
  // provider must sync at once, not be closed 4404 by what the server still held.
  const first = provider('first', config.cookies[0]);
  await until('synced', () => first.p.synced);
  first.doc.getText('source').insert(0, 'Before the archive\n');
  await until('typed', () => first.text().startsWith('Before the archive\n'));
  await sleep(200);
  const post = (archived) => fetch(`${config.origin}/api/documents/${config.document}/archive`, {
    method: 'POST',
    headers: { cookie: config.cookies[0], origin: config.origin, 'content-type': 'application/json' },
    body: JSON.stringify({ archived }),
  });
  let answer = await post(true);
  if (answer.status !== 200) finish(false, { error: `archive answered ${answer.status}` });
  await until('the first provider was closed 4404', () => count('first closed 4404') === 1);
  answer = await post(false);
  if (answer.status !== 200) finish(false, { error: `restore answered ${answer.status}` });
  const again = provider('again', config.cookies[0]);
  await until('a provider synced after the restore', () => again.p.synced && again.text() === first.text(), 5000);
  await sleep(300);
  const closes = count('again connection-close');
  finish(closes === 0, { closes, text: again.text() });
} else {
  finish(false, { error: `unknown mode ${config.mode}` });
}
