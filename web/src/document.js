// The document page: the text, edited together (Yjs over /api/yjs/{id}, CodeMirror 6), and beside
// it the room: Chat, the Planner's presence, run cards, Stop and Resume, and the open Decisions.
import * as Y from 'yjs';
import { WebsocketProvider } from 'y-websocket';
import { EditorView, basicSetup } from 'codemirror';
import { EditorState, Compartment } from '@codemirror/state';
import { markdown } from '@codemirror/lang-markdown';
import { yCollab } from 'y-codemirror.next';
import { el, clear, api, meta } from './dom.js';
import { decisions } from './decisions.js';
import { modelControls } from './model.js';
import { fileControls, messageFiles } from './files.js';
import { dictationControls } from './dictation.js';
import { participationControl } from './participation.js';
import { commentsPanel } from './comments.js';

const COLOURS = ['#30bced', '#6eeb83', '#ffbc42', '#ecd444', '#ee6352', '#9ac2c9', '#8acb88', '#1be7ff'];

function colourOf(login) {
  let h = 0;
  for (const c of login) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return COLOURS[h % COLOURS.length];
}

function socketBase() {
  return `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}`;
}

let requests = 0;
function requestId(kind) {
  requests += 1;
  return `${kind}-${Date.now().toString(36)}-${requests}`;
}

export async function documentPage(main, id) {
  clear(main);
  const login = meta('chopin-login');
  const record = await api(`/api/documents/${encodeURIComponent(id)}`);
  const doc = record.body ?? {};
  const [owner, repo] = (doc.repository ?? '/').split('/');
  document.title = `${doc.title ?? 'Document'} · Chopin`;

  const connection = el('span', { class: 'connection', id: 'connection' }, 'Connecting…');
  // A Planner the server runs itself has no presence to tell (no session:planner comes).
  const inServer = meta('chopin-harness') !== 'remote';
  const presence = el('span', { class: 'presence', id: 'presence' }, inServer ? 'Planner: in this server' : 'Planner: …');
  const readOnly = el('p', { class: 'read-only', id: 'read-only', hidden: true });
  const editorHost = el('div', { class: 'editor', id: 'editor' });
  const cards = el('section', { class: 'decisions', id: 'decisions' });
  const runs = el('section', { class: 'runs', id: 'runs' });
  const messages = el('ol', { class: 'messages', id: 'messages' });
  const earlier = el('button', { type: 'button', id: 'earlier', hidden: true }, 'Earlier messages');
  const text = el('textarea', { id: 'chat-text', rows: 3, maxlength: 20000, placeholder: 'Write to the room; mention @chopin to ask the Planner' });
  const refused = el('p', { class: 'refused', id: 'chat-refused', role: 'alert' });
  const send = el('button', { type: 'submit', id: 'send' }, 'Send');
  const stop = el('button', { type: 'button', id: 'stop' }, 'Stop');
  const resume = el('button', { type: 'button', id: 'resume' }, 'Resume');
  // Filled once the room is open: the model and command controls send on it.
  let room = null;
  const models = modelControls((frame) => room?.send(frame));
  const say = (words) => { refused.textContent = words; };
  const files = fileControls(id, say);
  const dictation = dictationControls(id, text, say);
  const participation = participationControl(id, say);
  // Sends a frame with a fresh requestId; resolves with the answer that names it.
  const request = (frame) => new Promise((resolve) => {
    const rid = requestId('comment');
    pending.set(rid, resolve);
    room.send({ ...frame, requestId: rid });
  });
  let view = null;
  const selection = () => {
    if (!view) return '';
    const { from, to } = view.state.selection.main;
    return view.state.sliceDoc(from, to);
  };
  const comments = commentsPanel(request, selection, say);
  const form = el('form', { id: 'chat-form' }, models.box, text, files.box, el('div', { class: 'actions' }, send, dictation.box, stop, resume), refused);

  main.classList.add('document');
  main.append(
    el('div', { class: 'doc-head' },
      el('h1', { id: 'title' }, doc.title ?? ''),
      el('p', { class: 'crumbs' },
        el('a', { href: `/documents/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}` }, doc.repository ?? ''),
        ' · ', connection, ' · ', presence)),
    el('div', { class: 'columns' },
      el('div', { class: 'left' }, readOnly, editorHost, cards, comments.section),
      el('aside', { class: 'chat' }, el('h2', {}, 'Chat'), participation.label, earlier, messages, runs, form)),
  );

  // --- The text ---------------------------------------------------------------------------------
  const ydoc = new Y.Doc();
  const ytext = ydoc.getText('source');
  const provider = new WebsocketProvider(`${socketBase()}/api/yjs`, id, ydoc);
  provider.awareness.setLocalStateField('user', { name: login, color: colourOf(login), colorLight: `${colourOf(login)}33` });
  const editable = new Compartment();
  let canWrite = false;
  view = new EditorView({
    parent: editorHost,
    state: EditorState.create({
      doc: ytext.toString(),
      extensions: [
        basicSetup,
        markdown(),
        EditorView.lineWrapping,
        editable.of([EditorView.editable.of(false), EditorState.readOnly.of(true)]),
        yCollab(ytext, provider.awareness),
      ],
    }),
  });
  const setWritable = (yes, known = true) => {
    canWrite = yes;
    view.dispatch({ effects: editable.reconfigure([EditorView.editable.of(yes), EditorState.readOnly.of(!yes)]) });
    readOnly.hidden = yes || !known;
    readOnly.textContent = yes ? '' : `You can read this document but not change it: you cannot push to ${doc.repository}.`;
    for (const b of [send, stop, resume]) b.disabled = !yes;
    text.disabled = !yes;
    files.enable(yes);
    dictation.enable(yes);
    participation.enable(yes);
    comments.enable(yes);
    drawCards();
  };
  provider.on('status', ({ status }) => {
    connection.textContent = status === 'connected' ? 'Connected' : 'Reconnecting…';
    connection.dataset.status = status;
  });
  provider.on('connection-close', (event) => {
    if (event && event.code >= 4400 && event.code < 4500) connection.textContent = closeWords(event.code);
  });

  // --- Decisions, read from the text -------------------------------------------------------------
  function drawCards() {
    clear(cards);
    const open = decisions(ytext.toString()).filter((d) => d.state === 'open');
    if (!open.length) return;
    cards.append(el('h2', {}, 'Open questions'));
    for (const d of open) cards.append(card(d));
  }
  function card(d) {
    const box = el('form', { class: 'card', 'data-decision': d.id });
    const note = el('p', { class: 'refused', role: 'alert' });
    if (d.header) box.append(el('p', { class: 'card-header' }, d.header));
    box.append(el('p', { class: 'question' }, d.question));
    const picks = d.options.map((o, i) => el('label', { class: 'option' },
      el('input', { type: d.multi ? 'checkbox' : 'radio', name: `pick-${d.id}`, value: i, disabled: !canWrite }),
      ' ', o.label, o.detail ? el('span', { class: 'detail' }, ` — ${o.detail}`) : null));
    box.append(...picks);
    const written = el('input', { type: 'text', name: 'text', placeholder: d.hint || 'Or write an answer', disabled: !canWrite });
    box.append(written, el('button', { type: 'submit', disabled: !canWrite }, 'Answer'), note);
    box.addEventListener('submit', (event) => {
      event.preventDefault();
      const chosen = [...box.querySelectorAll('input:checked')].map((i) => Number(i.value));
      const frame = { type: 'decision:answer', requestId: requestId('answer'), decision: d.id };
      if (chosen.length) frame.options = chosen;
      else frame.text = written.value;
      pending.set(frame.requestId, (answer) => { note.textContent = answer.type === 'decision:refused' ? answer.message : ''; });
      room.send(frame);
    });
    return box;
  }
  ytext.observe(() => drawCards());

  // --- The room: Chat, presence, runs ------------------------------------------------------------
  const pending = new Map();
  let oldest = null;
  const seen = new Set();
  /// One message, in its place by `seq` (history pages, live messages and the pages read again
  /// after a reconnect all land in order, each once).
  function line(entry) {
    if (seen.has(entry.seq)) return;
    seen.add(entry.seq);
    const who = entry.kind === 'member' ? (entry.author ?? '') : 'chopin';
    const item = el('li', { class: `message ${entry.kind}`, 'data-seq': entry.seq },
      el('span', { class: 'author' }, who), ' ', el('span', { class: 'text' }, entry.text),
      messageFiles(id, entry.references));
    const later = [...messages.children].find((li) => Number(li.dataset.seq) > entry.seq);
    if (later) messages.insertBefore(item, later);
    else {
      messages.append(item);
      messages.scrollTop = messages.scrollHeight;
    }
    if (oldest === null || entry.seq < oldest) oldest = entry.seq;
  }
  function showPresence(p) {
    const until = p.until ? ` until ${new Date(p.until).toLocaleTimeString()}` : '';
    const who = p.login ? ` (${p.login})` : '';
    const state = { attached: 'attached', detached: 'detached', disconnected: 'disconnected', none: 'none' }[p.state] ?? p.state;
    const away = p.state === 'detached' || p.state === 'disconnected';
    const seen = away && p.lastSeen ? `, last seen ${new Date(p.lastSeen).toLocaleTimeString()}` : '';
    if (p.state === 'starting') {
      presence.textContent = p.failure
        ? `Planner: can't connect to @${p.login}'s machine: ${p.failure.reason}`
        : `Planner: connecting to @${p.login}'s machine`;
    } else {
      presence.textContent = `Planner: ${state}${who}${p.state === 'detached' ? until : ''}${seen}`;
    }
    presence.dataset.state = p.state;
  }
  const runCards = new Map();
  function showRun(run) {
    const key = run.id ?? run.runId;
    const node = runCards.get(key) ?? el('div', { class: 'run', 'data-run': key });
    clear(node);
    node.append(el('strong', {}, run.title ?? run.name ?? 'Run'), ' ',
      el('span', { class: 'run-status' }, `${run.status ?? ''}${run.disconnected ? ' (disconnected)' : ''}`));
    if (!runCards.has(key)) {
      runCards.set(key, node);
      runs.append(node);
    }
  }
  api(`/api/documents/${encodeURIComponent(id)}/runs`).then((answer) => {
    for (const run of answer.body?.runs ?? []) showRun(run);
  });

  room = connectRoom(id, {
    json(frame) {
      if (models.frame(frame)) return;
      if (comments.frame(frame)) return;
      switch (frame.type) {
        case 'session:hello':
          files.limits(frame.attachments);
          dictation.available(frame.transcription);
          setWritable(Boolean(frame.canWrite));
          participation.read();
          comments.list();
          // Also after a reconnect: what was said meanwhile comes with the latest page.
          room.send({ type: 'chat:history', limit: 50 });
          break;
        case 'session:access':
          setWritable(Boolean(frame.canWrite));
          break;
        case 'session:planner':
          showPresence(frame.planner ?? {});
          break;
        case 'chat:message':
          line(frame);
          // A pause changing is said in Chat: read it again.
          if (frame.kind === 'system') participation.read();
          break;
        case 'chat:history': {
          const entries = frame.entries ?? [];
          for (const e of entries) line(e);
          // `more` speaks of what is older than this page; a page read after a reconnect says
          // nothing about pages older than the oldest shown.
          if (entries.length && entries[0].seq <= oldest) earlier.hidden = !frame.more;
          break;
        }
        case 'run:card':
          showRun(frame.run ?? {});
          break;
        case 'runs:lagged':
          api(`/api/documents/${encodeURIComponent(id)}/runs`).then((a) => (a.body?.runs ?? []).forEach(showRun));
          break;
        case 'planner:stopped':
          refused.textContent = frame.stopped ? '' : 'Nothing was running.';
          break;
        case 'error':
          refused.textContent = frame.message ?? frame.code;
          break;
        default: {
          const done = frame.requestId && pending.get(frame.requestId);
          if (done) {
            pending.delete(frame.requestId);
            done(frame);
          }
        }
      }
    },
    status(words) {
      if (words) connection.textContent = words;
    },
  });

  earlier.addEventListener('click', () => {
    if (oldest !== null) room.send({ type: 'chat:history', before: oldest, limit: 50 });
  });
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const body = text.value;
    if (!body.trim()) return;
    if (!files.ready()) {
      say('Wait for the files to finish uploading.');
      return;
    }
    dictation.stop('the message was sent');
    const id = requestId('send');
    refused.textContent = '';
    const attachments = files.ids();
    pending.set(id, (answer) => {
      if (answer.type === 'chat:refused') {
        refused.textContent = answer.message;
        if (!text.value) text.value = body;
      } else if (answer.type === 'chat:ack') {
        files.sent();
      }
    });
    text.value = '';
    const frame = { type: 'chat:send', requestId: id, text: body };
    const references = models.references(body);
    if (references) frame.references = references;
    if (attachments.length) frame.attachments = attachments;
    models.sent();
    room.send(frame);
  });
  models.command.addEventListener('change', () => models.pick(text));
  text.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  // A drop on the composer and a paste add files.
  form.addEventListener('dragover', (event) => event.preventDefault());
  form.addEventListener('drop', (event) => {
    event.preventDefault();
    if (canWrite) files.take([...(event.dataTransfer?.files ?? [])]);
  });
  text.addEventListener('paste', (event) => {
    const pasted = [...(event.clipboardData?.files ?? [])];
    if (pasted.length && canWrite) {
      event.preventDefault();
      files.take(pasted);
    }
  });
  stop.addEventListener('click', () => room.send({ type: 'planner:stop', requestId: requestId('stop') }));
  resume.addEventListener('click', () => room.send({ type: 'planner:resume', requestId: requestId('resume') }));
  // Nothing may be typed until the room says who you are (`session:hello`).
  setWritable(false, false);
}

function closeWords(code) {
  if (code === 4401) return 'Signed out: sign in again to go on.';
  if (code === 4403) return 'You no longer have access to this document.';
  if (code === 4404) return 'This document is gone (archived or removed).';
  return `Closed (${code}).`;
}

/// The room socket, opened again with backoff after anything but a refusal (44xx).
function connectRoom(id, handlers) {
  let socket = null;
  let delay = 250;
  const queue = [];
  function open() {
    socket = new WebSocket(`${socketBase()}/api/documents/${encodeURIComponent(id)}/room`);
    socket.addEventListener('open', () => {
      delay = 250;
      while (queue.length && socket.readyState === WebSocket.OPEN) socket.send(queue.shift());
    });
    socket.addEventListener('message', (event) => {
      if (typeof event.data !== 'string') return; // Yjs frames: the editor has its own socket
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      handlers.json(frame);
    });
    socket.addEventListener('close', (event) => {
      if (event.code >= 4400 && event.code < 4500) {
        handlers.status(closeWords(event.code));
        return;
      }
      handlers.status('Reconnecting…');
      setTimeout(open, delay);
      delay = Math.min(delay * 2, 5000);
    });
  }
  open();
  return {
    send(frame) {
      const text = JSON.stringify(frame);
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(text);
      else queue.push(text);
    },
  };
}
