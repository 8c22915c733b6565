// The live pages' one WebSocket loop (run, play, evaluation, race): connect, reopen after
// a drop with backoff, and stay closed once the page needs no socket. Each page says where
// to connect (with what it resumes from), when it is done and what a frame means.
(() => {
  // A quiet socket may have missed a message (e.g. the final status while Redis was busy):
  // reopening it after this long makes the server send again what the page lacks.
  const QUIET_MS = 30000;

  /**
   * Follows `path()` on this host until `done()`; returns `{ close() }`.
   *
   * - `path()` is asked at every (re)connect, so a resume carries what the page has shown
   *   by then (`?after=<last seq>`, `?version=<n>`).
   * - `done()` is asked before connecting, after every frame (true: the socket is closed)
   *   and on every close (true: no reconnect).
   * - `onMessage(data)` gets each frame parsed from JSON; `onOpen()` each open;
   *   `onDrop(retry)` each close that reconnects, in 250 ms · 2^retry (retry 1..6, back
   *   to 0 once a socket opens).
   * - `watchdog: true` closes (and so reopens) a socket silent for 30 s.
   * - `close()` closes the current socket; it reopens unless `done()`.
   */
  function open({ path, done, onMessage, onOpen, onDrop, watchdog = false }) {
    let ws = null;
    let retry = 0;

    function connect() {
      if (done()) return;
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const socket = new WebSocket(`${scheme}://${location.host}${path()}`);
      ws = socket;
      let quiet;
      const arm = () => {
        if (!watchdog) return;
        clearTimeout(quiet);
        quiet = setTimeout(() => { if (!done()) socket.close(); }, QUIET_MS);
      };
      socket.onopen = () => {
        retry = 0;
        arm();
        if (onOpen) onOpen();
      };
      socket.onmessage = (msg) => {
        arm();
        onMessage(JSON.parse(msg.data));
        if (done()) socket.close();
      };
      socket.onclose = () => {
        clearTimeout(quiet);
        if (done()) return;
        retry = Math.min(retry + 1, 6);
        if (onDrop) onDrop(retry);
        setTimeout(connect, 250 * 2 ** retry);
      };
    }

    connect();
    return { close() { if (ws) ws.close(); } };
  }

  window.LiveSocket = { open };
})();
