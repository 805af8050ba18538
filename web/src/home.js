// The start page: sign in, or open one of your repositories.
import { el, clear } from './dom.js';

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
  main.append(
    el('h1', {}, 'Your repositories'),
    el('p', {}, 'Open a GitHub repository you can read to see its documents.'),
    form,
    recent.length ? el('h2', {}, 'Opened before') : null,
    recent.length ? el('ul', { id: 'recent' }, recent.map((name) => {
      const [owner, repo] = name.split('/');
      return el('li', {}, el('a', { href: `/documents/${encodeURIComponent(owner)}/${encodeURIComponent(repo)}` }, name));
    })) : null,
  );
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
