// A repository's page: its documents (children under their parents) and a form to create one.
import { el, clear, api, words, safePath } from './dom.js';
import { remember } from './home.js';

export async function repositoryPage(main, name) {
  clear(main);
  const [owner, repo] = name.split('/');
  const base = `/api/repositories/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}/documents`;
  const list = el('ul', { id: 'documents' });
  const status = el('p', { class: 'status', id: 'repository-status' }, 'Loading…');
  const title = el('input', { id: 'new-title', name: 'title', placeholder: 'Title of a new document', required: true, maxlength: 200 });
  const refused = el('p', { class: 'refused', id: 'create-refused', role: 'alert' });
  const form = el('form', { id: 'create-document' }, title, ' ', el('button', { type: 'submit' }, 'Create'), refused);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    refused.textContent = '';
    const answer = await api(base, { method: 'POST', body: { title: title.value } });
    const url = safePath(answer.body?.url);
    if (answer.status === 201 && url) location.assign(url);
    else refused.textContent = words(answer);
  });
  main.append(el('h1', {}, name), status, list, el('h2', {}, 'New document'), form);

  const answer = await api(base);
  if (answer.status !== 200) {
    status.textContent = words(answer);
    form.remove();
    return;
  }
  remember(name);
  const documents = answer.body.documents ?? [];
  status.textContent = documents.length ? '' : 'No documents yet.';
  const byParent = new Map();
  for (const doc of documents) {
    const key = doc.parentId ?? '';
    if (!byParent.has(key)) byParent.set(key, []);
    byParent.get(key).push(doc);
  }
  const item = (doc) => {
    const href = safePath(doc.url);
    const children = byParent.get(doc.id) ?? [];
    return el('li', {},
      href ? el('a', { href }, doc.title) : doc.title,
      doc.archived ? el('span', { class: 'tag' }, ' archived') : null,
      children.length ? el('ul', {}, children.map(item)) : null);
  };
  list.append(...(byParent.get('') ?? []).map(item));
}
