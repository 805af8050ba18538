// Files in the composer: the + button, a drop on the composer and a paste add files; each is
// uploaded at once (its chip shows the bytes going), can be taken back until the message is
// sent, and the send names the uploaded ones. A sent message shows its files to everyone.
import { el } from './dom.js';

/// `n` bytes for a person: 900 B, 12 KB, 1.4 MB.
export function sizeWords(n) {
  if (n < 1000) return `${n} B`;
  if (n < 1000 * 1000) return `${Math.round(n / 100) / 10} KB`;
  return `${Math.round(n / 100000) / 10} MB`;
}

/// The composer's files for the document `channel`: `box` (the chips and the + button) goes in
/// the form; `limits(hello)` takes `session:hello`'s `attachments`; `ids()` names the uploaded
/// files for a send; `sent()` clears the chips once it is acknowledged; `take(files)` adds files
/// (from a drop or a paste).
export function fileControls(channel, say) {
  const input = el('input', { type: 'file', id: 'file-input', multiple: true, hidden: true });
  const add = el('button', { type: 'button', id: 'attach', title: 'Attach images or text files', 'aria-label': 'Attach files' }, '+');
  const chips = el('ul', { class: 'chips', id: 'file-chips' });
  const box = el('div', { class: 'files' }, add, input, chips);
  let limits = { maxBytes: 0, maxCount: 0, maxTotalBytes: 0 };
  const files = []; // { name, size, id?, chip, progress, request? }

  function setLimits(given) {
    limits = given ?? limits;
    add.hidden = !limits.maxCount;
  }

  function remove(entry) {
    entry.request?.abort();
    files.splice(files.indexOf(entry), 1);
    entry.chip.remove();
    if (entry.url) URL.revokeObjectURL(entry.url);
    if (entry.id) {
      fetch(`/api/channels/${encodeURIComponent(channel)}/attachments/${encodeURIComponent(entry.id)}`, {
        method: 'DELETE',
        credentials: 'same-origin',
      }).catch(() => {});
    }
  }

  function upload(file) {
    if (files.length >= limits.maxCount) {
      say(`A message carries at most ${limits.maxCount} files.`);
      return;
    }
    if (file.size > limits.maxBytes) {
      say(`${file.name} is larger than ${sizeWords(limits.maxBytes)}, the most one file may be.`);
      return;
    }
    const progress = el('progress', { max: 100, value: 0 });
    const entry = { name: file.name, size: file.size, progress };
    const picture = file.type.startsWith('image/') ? (entry.url = URL.createObjectURL(file)) : null;
    const take = el('button', { type: 'button', class: 'take-back', 'aria-label': `Remove ${file.name}` }, '×');
    entry.chip = el('li', { class: 'chip', 'data-name': file.name },
      picture ? el('img', { src: picture, alt: '' }) : null,
      el('span', { class: 'name' }, file.name), ' ',
      el('span', { class: 'size' }, sizeWords(file.size)), progress, take);
    take.addEventListener('click', () => remove(entry));
    chips.append(entry.chip);
    files.push(entry);
    const request = new XMLHttpRequest();
    entry.request = request;
    const query = new URLSearchParams({ name: file.name });
    if (file.type) query.set('type', file.type);
    request.open('POST', `/api/channels/${encodeURIComponent(channel)}/attachments?${query}`);
    request.upload.addEventListener('progress', (e) => {
      if (e.lengthComputable) progress.value = Math.round((e.loaded / e.total) * 100);
    });
    request.addEventListener('load', () => {
      entry.request = null;
      let body = null;
      try {
        body = JSON.parse(request.responseText);
      } catch {
        body = null;
      }
      if (request.status === 201 && body?.id) {
        entry.id = body.id;
        progress.remove();
        entry.chip.dataset.id = body.id;
        entry.chip.classList.add('uploaded');
      } else {
        say(`${file.name}: ${body?.message ?? `the server answered ${request.status}`}`);
        remove(entry);
      }
    });
    request.addEventListener('error', () => {
      say(`${file.name} could not be uploaded.`);
      remove(entry);
    });
    request.send(file);
  }

  function take(list) {
    for (const file of list) upload(file);
  }

  add.addEventListener('click', () => input.click());
  input.addEventListener('change', () => {
    take([...input.files]);
    input.value = '';
  });

  return {
    box,
    limits: setLimits,
    take,
    /// Whether every chip is uploaded (a send waits for them).
    ready: () => files.every((f) => f.id),
    ids: () => files.map((f) => f.id).filter(Boolean),
    sent() {
      for (const f of files.splice(0)) {
        f.chip.remove();
        if (f.url) URL.revokeObjectURL(f.url);
      }
    },
    enable(yes) {
      add.disabled = !yes;
    },
  };
}

/// A sent message's files, for everyone: an image as a picture, a text file as a download.
export function messageFiles(channel, references) {
  const files = (references ?? []).filter((r) => r && r.type === 'attachment' && typeof r.id === 'string');
  if (!files.length) return null;
  const list = el('ul', { class: 'message-files' });
  for (const f of files) {
    const href = `/api/channels/${encodeURIComponent(channel)}/attachments/${encodeURIComponent(f.id)}`;
    list.append(el('li', { class: `file ${f.kind === 'image' ? 'image' : 'text'}` },
      f.kind === 'image'
        ? el('a', { href, target: '_blank', rel: 'noopener' }, el('img', { src: href, alt: f.name ?? '' }))
        : el('a', { href, download: f.name ?? '' }, f.name ?? 'file'),
      ' ', el('span', { class: 'size' }, sizeWords(Number(f.size) || 0))));
  }
  return list;
}

