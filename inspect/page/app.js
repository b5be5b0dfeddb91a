// The agentsociety inspector's page: it reads the handler's JSON API and
// follows the event stream. Every text from the society goes into the page
// with textContent, never as markup.
'use strict';

const state = {
  last: 0,          // the newest event seen
  task: '',         // the selected task
  agent: '',        // the selected agent
  brief: null,      // its brief, which /api/org does not carry
  artifact: '',     // the artifact shown
  allowSend: false,
  seen: new Set(),  // ids of the messages listed for the selected task
};

const $ = (sel) => document.querySelector(sel);

// el makes an element with attributes (text sets textContent) and children.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = v;
    else if (k === 'onclick') e.addEventListener('click', v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids) if (k) e.append(k);
  return e;
}

async function getJSON(url) {
  const r = await fetch(url, { headers: { Accept: 'application/json' } });
  const body = await r.json();
  if (!r.ok) throw new Error(body.message || r.statusText);
  return body;
}

function time(t) {
  const d = new Date(t);
  return isNaN(d) ? '' : d.toLocaleTimeString();
}

function clip(s, n) {
  s = String(s ?? '');
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}

// changed reports whether data differs from what part last showed, and
// remembers it: a part is redrawn only when what it shows changed, so that
// what the user points at or types into stays put.
const shown = new Map();
function changed(part, data) {
  const key = JSON.stringify(data);
  if (shown.get(part) === key) return false;
  shown.set(part, key);
  return true;
}

// ---- the organisation

function renderOrg(org) {
  state.allowSend = org.allow_send;
  if (!changed('org', [org.agents, state.agent])) return;
  const kids = new Map();
  const byId = new Map(org.agents.map((a) => [a.id, a]));
  const tops = [];
  for (const a of org.agents) {
    if (a.id === 'user') continue;
    if (a.parent && byId.has(a.parent) && a.parent !== a.id) {
      if (!kids.has(a.parent)) kids.set(a.parent, []);
      kids.get(a.parent).push(a);
    } else {
      tops.push(a);
    }
  }
  const node = (a) => {
    const label = el('button', { class: 'node' + (a.id === state.agent ? ' selected' : ''), 'data-id': a.id,
      onclick: () => selectAgent(a.id) },
      el('span', { class: 'role', text: a.role || '?' }),
      a.role === a.id ? null : el('span', { class: 'id', text: a.id }),
      el('span', { class: 'status', 'data-status': a.status, text: a.status }),
      a.queued > 0 ? el('span', { class: 'queue', title: 'messages waiting', text: 'queue ' + a.queued }) : null,
      a.handling ? el('span', { class: 'busy', title: 'handling ' + a.handling, text: '● working' }) : null,
      a.usage ? el('span', { class: 'muted', text: a.usage.model_calls + ' calls' }) : null);
    const li = el('li', { class: 'agent', 'data-id': a.id }, label);
    const ks = kids.get(a.id);
    if (ks) li.append(el('ul', {}, ...ks.map(node)));
    return li;
  };
  const user = byId.get('user');
  $('#org').replaceChildren(...tops.map(node), user ? node(user) : null);
  if (state.agent) {
    const a = byId.get(state.agent);
    if (a) renderAgent({ ...a, brief: state.brief });
  }
}

async function selectAgent(id) {
  state.agent = id;
  state.brief = null;
  shown.delete('agent');
  const form = $('#agent-send');
  form.replaceChildren();
  if (state.allowSend && id !== 'user') form.append(sendForm(id));
  for (const b of document.querySelectorAll('#org .node')) b.classList.toggle('selected', b.dataset.id === id);
  try {
    const a = await getJSON('api/agents/' + encodeURIComponent(id));
    if (state.agent !== id) return;
    state.brief = a.brief;
    renderAgent(a);
  } catch (e) {
    $('#agent-info').replaceChildren(el('p', { class: 'error', text: e.message }));
    $('#agent').hidden = false;
  }
}

function usageText(u) {
  if (!u) return 'no budget of its own';
  const b = u.budget || {};
  const part = (used, max) => used + (max ? ' / ' + max : '');
  return part(u.model_calls, b.model_calls) + ' calls · ' + part(u.input_tokens, b.input_tokens) + ' in · ' +
    part(u.output_tokens, b.output_tokens) + ' out · ' + part(u.spawns, b.spawns) + ' spawns';
}

function renderAgent(a) {
  if (a.id !== state.agent || !changed('agent', a)) return;
  const dl = el('dl', {},
    el('dt', { text: 'agent' }), el('dd', { text: a.id }),
    el('dt', { text: 'role' }), el('dd', { text: a.role + (a.role_id ? ' (' + a.role_id + ')' : '') }),
    el('dt', { text: 'parent' }), el('dd', { text: a.parent || '—' }),
    el('dt', { text: 'task' }), el('dd', { text: a.task || '—' }),
    el('dt', { text: 'status' }), el('dd', { text: a.status + (a.handling ? ', handling ' + a.handling : '') }),
    el('dt', { text: 'queue' }), el('dd', { text: String(a.queued) }),
    el('dt', { text: 'budget' }), el('dd', { text: usageText(a.usage) }));
  if (a.brief) dl.append(el('dt', { text: 'objective' }), el('dd', { text: a.brief.objective || '' }));
  const contacts = el('ul', { class: 'list contacts', 'aria-label': 'contacts' },
    ...(a.contacts || []).map((c) => el('li', {},
      el('span', { class: 'id', text: c.id }), ' ', el('span', { text: c.role || '' }), ' ',
      el('span', { class: 'muted', text: c.source + (c.introduced_by ? ' by ' + c.introduced_by : '') }))));
  $('#agent-info').replaceChildren(el('h2', { text: 'Agent' }), dl, el('h2', { text: 'Contacts (' + (a.contacts || []).length + ')' }), contacts);
  $('#agent').hidden = false;
}

function sendForm(to) {
  const ta = el('textarea', { id: 'send-text', 'data-to': to, placeholder: 'a message from user to ' + to });
  const out = el('span', { id: 'send-result', class: 'muted' });
  const btn = el('button', { id: 'send', type: 'button', onclick: async () => {
    out.textContent = 'sending…';
    try {
      const r = await fetch('api/agents/' + encodeURIComponent(to) + '/messages', {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ text: ta.value }),
      });
      const body = await r.json();
      if (!r.ok) throw new Error(body.message || r.statusText);
      out.textContent = 'sent ' + body.ID;
      ta.value = '';
    } catch (e) {
      out.textContent = e.message;
      out.className = 'error';
    }
  } }, 'Send as user');
  return el('div', { class: 'send' }, el('h2', { text: 'Send' }), ta, btn, ' ', out);
}

// ---- tasks and their messages

function renderTasks(tasks) {
  if (!state.task && tasks.length > 0) selectTask(tasks[0].id);
  if (!changed('tasks', [tasks, state.task])) return;
  const body = $('#tasks tbody');
  body.replaceChildren(...tasks.map((t) => {
    const b = t.usage.budget || {};
    const tr = el('tr', { 'data-task': t.id, class: t.id === state.task ? 'selected' : '', onclick: () => selectTask(t.id) },
      el('td', { class: 'id', text: t.id }), el('td', { text: t.state }), el('td', { class: 'id', text: t.lead || '' }),
      el('td', { text: String(t.usage.model_calls) }),
      el('td', { text: t.usage.input_tokens + ' / ' + t.usage.output_tokens }),
      el('td', { text: b.model_calls ? b.model_calls + ' calls' : (b.input_tokens ? b.input_tokens + ' tokens' : '—') }));
    return tr;
  }));
}

async function selectTask(id) {
  state.task = id;
  state.seen = new Set();
  $('#task-label').textContent = id;
  $('#messages').replaceChildren();
  for (const tr of document.querySelectorAll('#tasks tbody tr')) tr.classList.toggle('selected', tr.dataset.task === id);
  // The messages so far, page by page; the stream adds the new ones.
  let from = 1;
  for (;;) {
    let page;
    try {
      page = await getJSON('api/events?task=' + encodeURIComponent(id) + '&from=' + from);
    } catch (e) {
      $('#messages').append(el('li', { class: 'error', text: e.message }));
      return;
    }
    if (state.task !== id) return;
    for (const e of page.events) addMessage(e);
    if (page.events.length === 0 || page.next <= from) return;
    from = page.next;
  }
}

function payloadText(m) {
  const p = m.Payload || {};
  return p.text || p.status || p.subtask_description || p.objective || p.error_message || JSON.stringify(p);
}

function addMessage(e) {
  if (e.kind !== 'message_accepted' || !e.message || e.task !== state.task) return;
  const m = e.message;
  if (state.seen.has(m.ID)) return;
  state.seen.add(m.ID);
  const list = $('#messages');
  const stick = list.scrollTop + list.clientHeight >= list.scrollHeight - 4;
  list.append(el('li', { class: 'msg', 'data-id': m.ID, 'data-seq': e.seq },
    el('div', { class: 'head' },
      el('span', { class: 'muted', text: time(m.SentAt) }),
      el('span', { class: 'id', text: m.From }), '→', el('span', { class: 'id', text: m.To }),
      el('span', { class: 'type', text: m.Type }),
      e.request ? el('span', { class: 'muted', text: e.request }) : null),
    el('div', { class: 'body', text: clip(payloadText(m), 600) })));
  if (stick) list.scrollTop = list.scrollHeight;
}

// ---- requests and artifacts

function renderRequests(reqs) {
  if (!changed('requests', reqs)) return;
  $('#requests').replaceChildren(...(reqs.length ? reqs.map((r) => el('li', { 'data-id': r.id },
    el('span', { class: 'id', text: r.id }), ' ', el('span', { text: r.from + ' → ' + r.to }), ' ',
    r.deadline ? el('span', { class: 'countdown', 'data-deadline': r.deadline, title: 'times out at ' + time(r.deadline) }) :
      el('span', { class: 'muted', text: 'no timeout' }),
    r.stuck ? el('span', { class: 'error', text: ' stuck' }) : null,
    el('div', { class: 'muted', text: clip(r.subtask, 200) }))) : [el('li', { class: 'muted', text: 'none' })]));
  tick();
}

function tick() {
  for (const c of document.querySelectorAll('.countdown')) {
    const left = Math.round((new Date(c.dataset.deadline) - Date.now()) / 1000);
    c.textContent = left > 0 ? left + 's left' : 'timing out';
  }
}

function renderArtifacts(arts) {
  if (!changed('artifacts', arts)) return;
  $('#artifacts').replaceChildren(...(arts.length ? arts.slice().reverse().map((a) => el('li', { 'data-id': a.id },
    el('button', { class: 'artifact', 'data-id': a.id, onclick: () => showArtifact(a.id), text: a.name || a.id }), ' ',
    el('span', { class: 'id', text: a.ref }), ' ', el('span', { class: 'muted', text: 'by ' + a.created_by }))) :
    [el('li', { class: 'muted', text: 'none' })]));
}

async function showArtifact(id) {
  state.artifact = id;
  const box = $('#viewer');
  box.hidden = false;
  let a;
  try {
    a = await getJSON('api/artifacts/' + encodeURIComponent(id));
  } catch (e) {
    box.replaceChildren(el('p', { class: 'error', text: e.message }));
    return;
  }
  const src = 'api/artifacts/' + encodeURIComponent(id) + '/content';
  const head = el('p', {}, el('strong', { text: a.name }), ' ', el('span', { class: 'muted', text: a.media_type + ', ' + a.size + ' bytes' }),
    ' ', el('a', { href: src, target: '_blank', rel: 'noopener', text: 'open' }));
  const mt = a.media_type.split(';')[0].trim().toLowerCase();
  let view;
  if (mt === 'text/html' || mt === 'image/svg+xml' || mt === 'application/xhtml+xml') {
    // Sandboxed twice: by this attribute and by the content's own
    // Content-Security-Policy. Its script runs in an opaque origin.
    view = el('iframe', { id: 'artifact-frame', sandbox: 'allow-scripts', src, title: a.name, referrerpolicy: 'no-referrer' });
    view.addEventListener('load', () => view.setAttribute('data-loaded', ''));
  } else if (mt.startsWith('image/')) {
    view = el('img', { src, alt: a.name });
  } else if (mt.startsWith('text/') || mt === 'application/json') {
    view = el('pre', { text: 'loading…' });
    fetch(src).then((r) => r.text()).then((t) => { view.textContent = t; }, (e) => { view.textContent = e.message; });
  } else {
    view = el('p', { class: 'muted', text: 'no preview for ' + a.media_type });
  }
  box.replaceChildren(head, view);
}

// ---- the event stream

function logEvent(e) {
  const log = $('#log');
  const who = (e.agent || '') + (e.target ? ' → ' + e.target : '');
  const what = e.name || e.detail || (e.message ? e.message.Type : '') || e.status || '';
  log.append(el('li', { 'data-seq': e.seq }, el('span', { class: 'muted', text: '#' + e.seq + ' ' }),
    el('span', { class: 'kind', text: e.kind }), ' ', who, ' ', el('span', { class: 'muted', text: clip(what, 160) })));
  while (log.childElementCount > 300) log.firstElementChild.remove();
  log.scrollTop = log.scrollHeight;
}

let refreshing = null;
let again = false;

// refresh reloads the organisation, tasks, requests and artifacts; calls
// while one runs make one more run after it.
async function refresh() {
  if (refreshing) { again = true; return; }
  refreshing = (async () => {
    do {
      again = false;
      try {
        const [org, tasks, reqs, arts] = await Promise.all([
          getJSON('api/org'), getJSON('api/tasks'), getJSON('api/requests'), getJSON('api/artifacts')]);
        renderOrg(org);
        renderTasks(tasks);
        renderRequests(reqs);
        renderArtifacts(arts);
        if (!state.last) state.last = org.last_event;
      } catch (e) {
        $('#conn').textContent = e.message;
        $('#conn').dataset.state = 'error';
      }
    } while (again);
  })();
  await refreshing;
  refreshing = null;
}

function setConn(s, text, title) {
  $('#conn').dataset.state = s;
  $('#conn').textContent = text;
  $('#conn').title = title || '';
}

async function start() {
  await refresh();
  const es = new EventSource('api/events/stream?from=' + (state.last + 1));
  es.addEventListener('open', () => setConn('live', 'live'));
  es.addEventListener('error', () => setConn('connecting', 'reconnecting'));
  es.addEventListener('event', (m) => {
    const e = JSON.parse(m.data);
    state.last = e.seq;
    $('#last').textContent = 'event #' + e.seq;
    logEvent(e);
    addMessage(e);
    refresh();
  });
  es.addEventListener('missed', (m) => {
    const x = JSON.parse(m.data);
    const b = $('#missed');
    b.textContent = x.count + ' events missed (' + x.from + '–' + (x.oldest - 1) + ' are no longer kept)';
    b.hidden = false;
  });
  es.addEventListener('reset', () => {
    // The host started a new society: what the page shows is the old one's.
    es.close();
    location.reload();
  });
  let polling = null;
  es.addEventListener('off', (m) => {
    // The society keeps no events: nothing will come on the stream, which
    // stays open until the society closes. Reload what the page shows.
    setConn('off', 'events off', JSON.parse(m.data).message);
    if (!polling) polling = setInterval(refresh, 5000);
  });
  es.addEventListener('closed', () => {
    es.close();
    if (polling) clearInterval(polling);
    setConn('closed', 'society closed');
  });
  setInterval(tick, 1000);
}

start();
