// A WebRTC phone made of JsSIP, driven by e2e/browser's Go test: each
// function returns a promise that settles on the JsSIP event the test
// waits for, or rejects on the event that says it failed, or after a
// time, with every event seen so far, so that a failure says where the
// call stopped.
'use strict';

const state = {
  events: [],
  waiters: [],
  ua: null,
  session: null,
};

function emit(name, detail) {
  const e = detail === undefined ? name : name + ': ' + detail;
  state.events.push(e);
  console.log('phone event ' + e);
  for (const w of state.waiters.slice()) {
    if (w.names.includes(name)) {
      w.done(null, e);
    } else if (w.fails.includes(name)) {
      w.done(new Error(e + ' (events: ' + state.events.join(', ') + ')'));
    }
  }
}

// wait settles on the first of names after the mark (resolves) or of
// fails (rejects), or rejects after ms.
function wait(names, fails, ms) {
  return new Promise((resolve, reject) => {
    const w = { names, fails };
    const timer = setTimeout(() => w.done(new Error('no ' + names.join(' or ') + ' within ' + ms + ' ms (events: ' + state.events.join(', ') + ')')), ms);
    w.done = (err, e) => {
      clearTimeout(timer);
      state.waiters = state.waiters.filter((x) => x !== w);
      if (err) reject(err); else resolve(e);
    };
    state.waiters.push(w);
  });
}

// loopbackOnly drops every ICE candidate not on 127.0.0.1 from the
// browser's own SDP: the test's peers are all there, and an answer or offer
// naming the machine's other addresses would invite media to them.
function loopbackOnly(sdp) {
  return sdp.split('\r\n').filter((l) => !l.startsWith('a=candidate:') || l.split(' ')[4] === '127.0.0.1').join('\r\n');
}

function watchSession(s) {
  state.session = s;
  s.on('sdp', (e) => {
    if (e.originator === 'local') e.sdp = loopbackOnly(e.sdp);
  });
  s.on('progress', (e) => emit('progress', e.response ? e.response.status_code : ''));
  s.on('accepted', () => emit('accepted'));
  s.on('confirmed', () => emit('confirmed'));
  s.on('ended', (e) => emit('ended', e.originator + ' ' + e.cause));
  s.on('failed', (e) => emit('failed', e.originator + ' ' + e.cause + (e.message && e.message.status_code ? ' ' + e.message.status_code : '')));
}

// start registers uri with password over the WebSocket at wsURL.
function start(wsURL, uri, password) {
  JsSIP.debug.enable('JsSIP:Transport JsSIP:RTCSession JsSIP:UA JsSIP:Registrator');
  const socket = new JsSIP.WebSocketInterface(wsURL);
  const ua = new JsSIP.UA({ sockets: [socket], uri, password, register: true, register_expires: 600, session_timers: false });
  state.ua = ua;
  ua.on('connected', () => emit('connected'));
  ua.on('disconnected', () => emit('disconnected'));
  ua.on('registered', () => emit('registered'));
  ua.on('registrationFailed', (e) => emit('registrationFailed', e.cause + (e.response ? ' ' + e.response.status_code : '')));
  ua.on('newRTCSession', (e) => {
    if (e.originator !== 'remote') return;
    emit('incoming', e.request.from.uri.toString());
    watchSession(e.session);
    e.session.answer({ mediaConstraints: { audio: true, video: false } });
  });
  const p = wait(['registered'], ['registrationFailed'], 20000);
  ua.start();
  return p;
}

// connect opens the WebSocket alone (no registration) and settles on
// connected, or rejects on disconnected: a refused Upgrade.
function connect(wsURL) {
  const ua = new JsSIP.UA({ sockets: [new JsSIP.WebSocketInterface(wsURL)], uri: 'sip:probe@example.test', register: false });
  state.ua = ua;
  ua.on('connected', () => emit('connected'));
  ua.on('disconnected', (e) => emit('disconnected', e.code === undefined ? '' : String(e.code)));
  const p = wait(['connected'], ['disconnected'], 20000);
  ua.start();
  return p.finally(() => ua.stop());
}

// call calls target and settles once the call is up (confirmed).
function call(target) {
  const p = wait(['confirmed'], ['failed', 'ended'], 20000);
  const s = state.ua.call(target, {
    mediaConstraints: { audio: true, video: false },
    pcConfig: { iceServers: [] },
  });
  watchSession(s);
  return p;
}

// incoming settles once a call from elsewhere was answered and is up.
function incoming() {
  return wait(['confirmed'], ['failed', 'ended'], 20000);
}

// hangup ends the call and settles on its end.
function hangup() {
  const p = wait(['ended'], ['failed'], 10000);
  state.session.terminate();
  return p;
}

// ended settles when the other side ended the call.
function ended() {
  return wait(['ended'], ['failed'], 20000);
}

// arm starts waiting for what (incoming or ended) before the test makes
// it happen elsewhere; armed(what) then settles as that wait does.
function arm(what) {
  state.armed = state.armed || {};
  const p = window.phone[what]();
  p.catch(() => {}); // settled by armed(), not unhandled meanwhile
  state.armed[what] = p;
  return 'armed ' + what;
}

function armed(what) {
  return state.armed[what];
}

window.phone = { start, connect, call, incoming, hangup, ended, arm, armed, events: () => state.events.slice() };
