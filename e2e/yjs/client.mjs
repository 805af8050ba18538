// Real Yjs clients for Chopin's end-to-end tests. Speaks the y-protocols sync and awareness
// messages over Chopin's room socket (binary frames), the way y-websocket's provider does, and
// reads Chopin's JSON text frames beside them.
//
// Usage: node client.mjs '<json>' where json is
//   { "mode": "converge" | "read" | "write-expect-refusal",
//     "url": "ws://127.0.0.1:PORT/api/documents/ID/room", "origin": "http://127.0.0.1:PORT",
//     "cookies": ["chopin_session=…", …], "timeoutMs": 10000 }
// Prints one JSON line with what it saw; exits non-zero on failure.

import * as Y from 'yjs';
import * as syncProtocol from 'y-protocols/sync';
import * as awarenessProtocol from 'y-protocols/awareness';
import * as encoding from 'lib0/encoding';
import * as decoding from 'lib0/decoding';
import WebSocket from 'ws';

const MESSAGE_SYNC = 0;
const MESSAGE_AWARENESS = 1;
const config = JSON.parse(process.argv[2]);
const timeoutMs = config.timeoutMs ?? 10000;

const clients = [];
function fail(why) {
  const seen = clients.map((c) => ({ synced: c.synced, text: c.text(), peers: [...c.peers], json: c.json }));
  console.log(JSON.stringify({ ok: false, error: why, clients: seen }));
  process.exit(1);
}
setTimeout(() => fail(`timed out after ${timeoutMs} ms`), timeoutMs).unref();

/** One Yjs client on the room socket. */
function client(name, cookie) {
  const doc = new Y.Doc();
  const awareness = new awarenessProtocol.Awareness(doc);
  awareness.setLocalState({ user: name });
  const ws = new WebSocket(config.url, { headers: { cookie, origin: config.origin } });
  ws.binaryType = 'arraybuffer';
  const state = { doc, ws, json: [], synced: false, peers: new Set() };
  let onSynced;
  state.whenSynced = new Promise((resolve) => (onSynced = resolve));
  ws.on('open', () => {
    const step1 = encoding.createEncoder();
    encoding.writeVarUint(step1, MESSAGE_SYNC);
    syncProtocol.writeSyncStep1(step1, doc);
    ws.send(encoding.toUint8Array(step1));
    const aw = encoding.createEncoder();
    encoding.writeVarUint(aw, MESSAGE_AWARENESS);
    encoding.writeVarUint8Array(aw, awarenessProtocol.encodeAwarenessUpdate(awareness, [doc.clientID]));
    ws.send(encoding.toUint8Array(aw));
  });
  ws.on('message', (data, isBinary) => {
    if (!isBinary) {
      state.json.push(JSON.parse(data.toString()));
      return;
    }
    const decoder = decoding.createDecoder(new Uint8Array(data));
    const type = decoding.readVarUint(decoder);
    if (type === MESSAGE_SYNC) {
      const reply = encoding.createEncoder();
      encoding.writeVarUint(reply, MESSAGE_SYNC);
      const kind = syncProtocol.readSyncMessage(decoder, reply, doc, 'server');
      if (encoding.length(reply) > 1) ws.send(encoding.toUint8Array(reply));
      if (kind === syncProtocol.messageYjsSyncStep2 && !state.synced) {
        state.synced = true;
        onSynced();
      }
    } else if (type === MESSAGE_AWARENESS) {
      const update = decoding.readVarUint8Array(decoder);
      awarenessProtocol.applyAwarenessUpdate(awareness, update, 'server');
      for (const [id, s] of awareness.getStates()) if (id !== doc.clientID && s.user) state.peers.add(s.user);
    }
  });
  ws.on('error', (e) => fail(`${name}: ${e.message}`));
  doc.on('update', (update, origin) => {
    if (origin === 'server') return;
    const enc = encoding.createEncoder();
    encoding.writeVarUint(enc, MESSAGE_SYNC);
    syncProtocol.writeUpdate(enc, update);
    ws.send(encoding.toUint8Array(enc));
  });
  state.text = () => doc.getText('source').toString();
  clients.push(state);
  return state;
}

const until = (check) =>
  new Promise((resolve) => {
    const tick = () => (check() ? resolve() : setTimeout(tick, 10));
    tick();
  });

if (config.mode === 'converge') {
  const [a, b] = [client('a', config.cookies[0]), client('b', config.cookies[1])];
  await Promise.all([a.whenSynced, b.whenSynced]);
  const before = a.text();
  // Both edit at once, at different places.
  a.doc.getText('source').insert(0, 'Line from A\n');
  b.doc.getText('source').insert(b.text().length, 'Line from B 🎉\n');
  await until(() => a.text() === b.text() && a.text().includes('Line from A') && a.text().includes('Line from B'));
  await until(() => a.peers.has('b') && b.peers.has('a'));
  console.log(JSON.stringify({ ok: true, before, text: a.text(), awareness: [...a.peers] }));
  a.ws.close();
  b.ws.close();
} else if (config.mode === 'read') {
  const c = client('reader', config.cookies[0]);
  await c.whenSynced;
  console.log(JSON.stringify({ ok: true, text: c.text(), json: c.json }));
  c.ws.close();
} else if (config.mode === 'write-expect-refusal') {
  const c = client('reader', config.cookies[0]);
  await c.whenSynced;
  c.doc.getText('source').insert(0, 'A reader tries to write\n');
  await until(() => c.json.some((m) => m.type === 'error'));
  console.log(JSON.stringify({ ok: true, json: c.json }));
  c.ws.close();
} else {
  fail(`unknown mode ${config.mode}`);
}
// Done: give the closes a moment to go out, then exit whatever the sockets still do.
setTimeout(() => process.exit(0), 200);
