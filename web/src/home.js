// The start page: sign in, or open one of your repositories.
import { el, clear, api, words } from './dom.js';

export function homePage(main, signedIn, signIn) {
  if (!signedIn) {
    signIn(main, 'Chopin keeps a repository\'s plans as documents you edit together, with a Planner in the conversation beside them.');
    return;
  }
  clear(main);
  const input = el('input', {
    id: 'repository', name: 'repository', placeholder: 'owner/repository', required: true,
    pattern: '[A-Za-z0-9_.\\-]+/[A-Za-z0-9_.\\-]+', autocomplete: 'on',
  });
  const form = el('form', { id: 'open-repository' },
    el('label', { for: 'repository' }, 'Repository '), input, ' ',
    el('button', { type: 'submit' }, 'Open'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const [owner, repo] = input.value.trim().split('/');
    if (!owner || !repo) return;
    remember(`${owner}/${repo}`);
    location.assign(`/documents/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}`);
  });
  const recent = recentRepositories();
  const yours = el('ul', { id: 'repositories' });
  const status = el('p', { class: 'status', id: 'repositories-status' }, 'Asking GitHub…');
  main.append(
    el('h1', {}, 'Your repositories'),
    status,
    yours,
    el('p', {}, 'Or open any GitHub repository you can read:'),
    form,
    recent.length ? el('h2', {}, 'Opened before') : null,
    recent.length ? el('ul', { id: 'recent' }, recent.map((name) => {
      const [owner, repo] = name.split('/');
      return el('li', {}, el('a', { href: `/documents/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}` }, name));
    })) : null,
  );
  api('/api/repositories').then((answer) => {
    if (answer.status !== 200) {
      status.textContent = words(answer);
      return;
    }
    const names = answer.body.repositories ?? [];
    status.textContent = names.length
      ? (answer.body.more ? 'The first of the repositories this server\'s GitHub App reaches for you:' : '')
      : 'This server\'s GitHub App reaches none of your repositories yet: install it on an account or organisation, or open a repository below.';
    for (const name of names) {
      const [owner, repo] = name.split('/');
      yours.append(el('li', {}, el('a', { href: `/documents/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}` }, name)));
    }
  });
}

function recentRepositories() {
  try {
    const list = JSON.parse(localStorage.getItem('chopin-repositories') ?? '[]');
    return Array.isArray(list) ? list.filter((x) => typeof x === 'string').slice(0, 20) : [];
  } catch {
    return [];
  }
}

export function remember(name) {
  const list = [name, ...recentRepositories().filter((x) => x !== name)].slice(0, 20);
  localStorage.setItem('chopin-repositories', JSON.stringify(list));
}
