// The live pages' one WebSocket loop (run, play, evaluation, race): connect, reopen after
// a drop with backoff, and stay closed once the page needs no socket. Each page says where
// to connect (with what it resumes from), when it is done and what a frame means. While a
// socket is down the page keeps what it shows and one notice says it is reconnecting.
(() => {
  // A quiet socket may have missed a message (e.g. the final status while Redis was busy):
  // reopening it after this long makes the server send again what the page lacks. The
  // run and evaluation sockets send `{"type": "keepalive"}` more often (every 15 s while
  // their run or evaluation goes: apps/runs/keepalive.py), so a healthy socket is never
  // reopened; such frames reach no page.
  const QUIET_MS = 30000;
  // A drop that reopens within this long (the watchdog's, a resume) shows no notice.
  const NOTICE_AFTER_MS = 1000;
  const NOTICE_TEXT =
    "Reconnecting… The page keeps what it shows and catches up once the connection is back.";

  // The page's sockets that are down and will reopen (a race follows one per lane): the
  // notice shows while any is, and clears once every one is open again or done.
  const down = new Set();
  let notice = null;
  let noticeTimer = null;

  function noticeElement() {
    if (!notice) {
      notice = document.createElement("p");
      notice.className = "hidden-banner live-notice";
      notice.dataset.testid = "live-notice";
      notice.setAttribute("role", "status");
      notice.textContent = NOTICE_TEXT;
      notice.hidden = true;
      (document.querySelector("main") || document.body).prepend(notice);
    }
    return notice;
  }

  function setDown(socket, isDown) {
    if (isDown) down.add(socket);
    else down.delete(socket);
    if (down.size && !noticeTimer && (!notice || notice.hidden)) {
      noticeTimer = setTimeout(() => {
        noticeTimer = null;
        if (down.size) noticeElement().hidden = false;
      }, NOTICE_AFTER_MS);
    } else if (!down.size) {
      clearTimeout(noticeTimer);
      noticeTimer = null;
      if (notice) notice.hidden = true;
    }
  }

  /**
   * Follows `path()` on this host until `done()`; returns `{ close() }`.
   *
   * - `path()` is asked at every (re)connect, so a resume carries what the page has shown
   *   by then (`?after=<last seq>`, `?version=<n>`).
   * - `done()` is asked before connecting, after every frame (true: the socket is closed)
   *   and on every close (true: no reconnect).
   * - `onMessage(data)` gets each frame parsed from JSON; `onOpen()` each socket's first
   *   frame; `onDrop(retry)` each close that reconnects, in 250 ms · 2^retry (retry 1..6,
   *   back to 0 once a socket has sent a frame). A socket is live from its first frame, not
   *   from its handshake: a server that cannot reach Redis or the database accepts and
   *   closes at once (1013 "Try Again Later"), and that is a drop like any other.
   * - `watchdog: true` closes (and so reopens) a socket silent for 30 s.
   * - `close()` closes the current socket; it reopens unless `done()`.
   *
   * While it is down for more than a second, the page's notice (`[data-testid=live-notice]`,
   * made on first need at the top of `<main>`) says "Reconnecting…".
   */
  function open({ path, done, onMessage, onOpen, onDrop, watchdog = false }) {
    const self = {};
    let ws = null;
    let retry = 0;

    function connect() {
      if (done()) {
        setDown(self, false);
        return;
      }
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const socket = new WebSocket(`${scheme}://${location.host}${path()}`);
      ws = socket;
      let quiet;
      const arm = () => {
        if (!watchdog) return;
        clearTimeout(quiet);
        quiet = setTimeout(() => { if (!done()) socket.close(); }, QUIET_MS);
      };
      let live = false;
      socket.onopen = arm;
      socket.onmessage = (msg) => {
        arm();
        if (!live) {
          live = true;
          retry = 0;
          setDown(self, false);
          if (onOpen) onOpen();
        }
        const data = JSON.parse(msg.data);
        if (data && data.type === "keepalive") return;
        onMessage(data);
        if (done()) socket.close();
      };
      socket.onclose = () => {
        clearTimeout(quiet);
        if (done()) {
          setDown(self, false);
          return;
        }
        setDown(self, true);
        retry = Math.min(retry + 1, 6);
        if (onDrop) onDrop(retry);
        setTimeout(connect, 250 * 2 ** retry);
      };
    }

    connect();
    self.close = () => { if (ws) ws.close(); };
    return self;
  }

  window.LiveSocket = { open };
})();
