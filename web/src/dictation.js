// Dictation through the server's transcription: shown only where `session:hello` names one
// (the browser's own recognition is never used then, and this page offers none otherwise). A
// press starts recording on the device; a second press, Escape, sending, hiding the page or
// leaving stops it; the recording is sent to the server and its words are written at the caret
// the person had when they pressed, the words still coming shown beside the box.
import { el } from './dom.js';

export function dictationControls(channel, text, say) {
  const button = el('button', { type: 'button', id: 'dictate', hidden: true, 'aria-pressed': 'false', title: 'Dictate (Alt+Shift+M)' }, 'Dictate');
  const clock = el('span', { class: 'dictation-clock', id: 'dictation-clock', hidden: true });
  const coming = el('span', { class: 'dictation-coming', id: 'dictation-coming' });
  const live = el('span', { class: 'visually-hidden', role: 'status', 'aria-live': 'polite', id: 'dictation-status' });
  const box = el('div', { class: 'dictation' }, button, clock, coming, live);
  let maxBytes = 0;
  let recorder = null;
  let chunks = [];
  let bytes = 0;
  let started = 0;
  let ticking = null;
  let why = '';

  function tell(words) {
    live.textContent = words;
  }

  /// Writes `words` into the draft at the caret, spaced as typing would.
  function write(words) {
    if (!words) return;
    const at = text.selectionStart ?? text.value.length;
    const before = text.value.slice(0, at);
    const after = text.value.slice(text.selectionEnd ?? at);
    const spaced = (before && !/\s$/.test(before) ? ' ' : '') + words.trim();
    text.value = before + spaced + after;
    const caret = before.length + spaced.length;
    text.setSelectionRange(caret, caret);
  }

  async function transcribe(blob) {
    button.disabled = true;
    tell('Transcribing');
    coming.textContent = 'Transcribing…';
    let response;
    try {
      response = await fetch(`/api/channels/${encodeURIComponent(channel)}/transcriptions`, {
        method: 'POST',
        credentials: 'same-origin',
        body: blob,
      });
    } catch {
      say('The recording could not be sent: the connection was lost.');
      coming.textContent = '';
      button.disabled = false;
      return;
    }
    if (!response.ok) {
      let body = null;
      try {
        body = await response.json();
      } catch {
        body = null;
      }
      say(body?.message ?? `The recording could not be transcribed (${response.status}).`);
      coming.textContent = '';
      button.disabled = false;
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffered = '';
    let heard = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 1);
        let frame;
        try {
          frame = JSON.parse(line);
        } catch {
          continue;
        }
        if (typeof frame.delta === 'string') {
          heard += frame.delta;
          coming.textContent = heard;
        } else if (typeof frame.text === 'string') {
          write(frame.text);
          heard = '';
        } else if (typeof frame.error === 'string') {
          say(`The recording could not be transcribed: ${frame.error}`);
        }
      }
    }
    coming.textContent = '';
    button.disabled = false;
    tell(why ? `Dictation stopped: ${why}` : 'Dictation stopped');
  }

  async function start() {
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (e) {
      say(e?.name === 'NotAllowedError' ? 'The microphone is blocked for this page.' : 'No microphone could be opened.');
      return;
    }
    chunks = [];
    bytes = 0;
    why = '';
    recorder = new MediaRecorder(stream);
    recorder.addEventListener('dataavailable', (e) => {
      if (!e.data.size) return;
      chunks.push(e.data);
      bytes += e.data.size;
      // Stop before the recording is longer than the server takes.
      if (bytes > maxBytes * 0.9) stop('it reached the longest recording the server takes');
    });
    recorder.addEventListener('stop', () => {
      for (const track of stream.getTracks()) track.stop();
      const blob = new Blob(chunks, { type: recorder.mimeType || 'audio/webm' });
      recorder = null;
      if (blob.size) transcribe(blob);
    });
    recorder.start(1000);
    started = Date.now();
    button.setAttribute('aria-pressed', 'true');
    clock.hidden = false;
    clock.textContent = '0:00';
    ticking = setInterval(() => {
      const s = Math.floor((Date.now() - started) / 1000);
      clock.textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
    }, 500);
    tell('Dictation started');
  }

  function stop(reason = '') {
    if (!recorder) return;
    why = reason;
    clearInterval(ticking);
    clock.hidden = true;
    button.setAttribute('aria-pressed', 'false');
    recorder.stop();
  }

  button.addEventListener('click', () => (recorder ? stop() : start()));
  document.addEventListener('keydown', (e) => {
    if (button.hidden) return;
    if (e.key === 'Escape' && recorder) stop();
    if (e.altKey && e.shiftKey && (e.key === 'M' || e.key === 'm' || e.code === 'KeyM')) {
      e.preventDefault();
      if (recorder) stop();
      else if (!button.disabled) start();
    }
  });
  document.addEventListener('visibilitychange', () => {
    if (document.hidden) stop('the page was hidden');
  });

  return {
    box,
    /// `session:hello`'s `transcription`: the button shows only where the server has one.
    available(transcription) {
      maxBytes = Number(transcription?.maxBytes) || 0;
      button.hidden = !(maxBytes && navigator.mediaDevices && window.MediaRecorder);
    },
    stop,
    enable(yes) {
      if (!yes) stop('the document stopped taking messages');
      button.disabled = !yes;
    },
  };
}
