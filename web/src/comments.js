// Comment threads on the document's passages: start one on the selected passage, reply,
// send a note to chopin, resolve. Everything goes over the room socket; the server tells every
// page of each change once it is saved (comment:thread).
import { el, clear } from './dom.js';

/// The panel. `request(frame)` sends a frame with a requestId and resolves with its answer;
/// `selection()` is the editor's selected text; `say(words)` shows a refusal.
export function commentsPanel(request, selection, say) {
  const quote = el('input', { type: 'text', id: 'comment-quote', maxlength: 1000, placeholder: 'The passage (select it in the text)' });
  const text = el('textarea', { id: 'comment-text', rows: 2, maxlength: 4000, placeholder: 'Comment on the passage' });
  const toChopin = el('input', { type: 'checkbox', id: 'comment-to-chopin' });
  const start = el('button', { type: 'submit', id: 'comment-start' }, 'Comment');
  const form = el('form', { id: 'comment-form' }, quote, text,
    el('label', { for: 'comment-to-chopin' }, toChopin, ' Send to chopin'), start);
  const list = el('div', { id: 'threads' });
  const section = el('section', { class: 'comments', id: 'comments' }, el('h2', {}, 'Comments'), form, list);
  const threads = new Map();
  let writable = false;

  text.addEventListener('focus', () => {
    const picked = selection();
    if (picked && !quote.value) quote.value = picked.slice(0, 1000);
  });

  function node(thread) {
    let entry = threads.get(thread.id);
    if (!entry) {
      const notes = el('ol', { class: 'notes' });
      const reply = el('textarea', { class: 'reply-text', rows: 1, maxlength: 4000, placeholder: 'Reply' });
      const replyToChopin = el('input', { type: 'checkbox', class: 'reply-to-chopin' });
      const send = el('button', { type: 'submit', class: 'reply-send' }, 'Reply');
      const resolve = el('button', { type: 'button', class: 'resolve' }, 'Resolve');
      const replyForm = el('form', { class: 'reply-form' }, reply,
        el('label', {}, replyToChopin, ' Send to chopin'), send, resolve);
      const state = el('p', { class: 'thread-state' });
      const box = el('div', { class: 'thread', 'data-thread': thread.id },
        el('blockquote', {}, thread.quote ?? ''), notes, state, replyForm);
      entry = { box, notes, state, replyForm, seen: new Set(), thread };
      replyForm.addEventListener('submit', async (event) => {
        event.preventDefault();
        if (!reply.value.trim()) return;
        const frame = { type: 'comment:reply', thread: thread.id, text: reply.value };
        if (replyToChopin.checked) frame.to = 'planner';
        const answer = await request(frame);
        if (answer.type === 'comment:ack') {
          reply.value = '';
          replyToChopin.checked = false;
          show(answer.thread, answer.note);
        } else say(answer.message ?? answer.code);
      });
      resolve.addEventListener('click', async () => {
        const answer = await request({ type: 'comment:resolve', thread: thread.id });
        if (answer.type === 'comment:ack') show(answer.thread);
        else say(answer.message ?? answer.code);
      });
      threads.set(thread.id, entry);
      list.prepend(box);
    }
    return entry;
  }

  function show(thread, note) {
    if (!thread?.id) return;
    const entry = node(thread);
    entry.thread = { ...entry.thread, ...thread };
    if (note && !entry.seen.has(note.seq)) {
      entry.seen.add(note.seq);
      const who = note.planner ? 'chopin' : `@${note.author}`;
      const item = el('li', { class: note.planner ? 'note planner' : 'note', 'data-seq': note.seq },
        el('strong', {}, who), note.toPlanner ? ' (to chopin)' : '', ': ', note.text ?? '');
      const after = [...entry.notes.children].find((li) => Number(li.dataset.seq) > note.seq);
      entry.notes.insertBefore(item, after ?? null);
    }
    const t = entry.thread;
    entry.state.textContent = t.resolved ? `Resolved by @${t.resolvedBy}` : t.full ? 'This thread is full.' : '';
    entry.box.dataset.resolved = t.resolved ? 'yes' : 'no';
    entry.replyForm.hidden = Boolean(t.resolved || t.full) || !writable;
  }

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const passage = quote.value.trim() || selection().trim();
    if (!passage) {
      say('Select the passage to comment on first.');
      return;
    }
    if (!text.value.trim()) return;
    const frame = { type: 'comment:start', quote: passage, text: text.value };
    if (toChopin.checked) frame.to = 'planner';
    const answer = await request(frame);
    if (answer.type === 'comment:ack') {
      quote.value = '';
      text.value = '';
      toChopin.checked = false;
      show(answer.thread, answer.note);
    } else say(answer.message ?? answer.code);
  });

  return {
    section,
    /// Reads again every thread (on opening, and after falling behind).
    async list() {
      const answer = await request({ type: 'comment:list' });
      if (answer.type !== 'comment:threads') return;
      clear(list);
      threads.clear();
      for (const thread of [...(answer.threads ?? [])].reverse()) {
        for (const note of thread.notes ?? []) show(thread, note);
      }
    },
    /// A frame of the room: whether it was a comment frame.
    frame(frame) {
      if (frame.type === 'comment:thread') {
        show(frame.thread, frame.note);
        return true;
      }
      if (frame.type === 'comment:lagged') {
        this.list();
        return true;
      }
      return false;
    },
    enable(yes) {
      writable = yes;
      for (const input of [quote, text, toChopin, start]) input.disabled = !yes;
      for (const entry of threads.values()) entry.replyForm.hidden = !yes || Boolean(entry.thread.resolved || entry.thread.full);
    },
  };
}
