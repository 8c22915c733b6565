// The words of a live page's LLM call line (run and play pages): what a `call` frame of
// /ws/runs/<id>/?calls=1 says (apps/runs/consumers.py), ticking while the call waits.
(() => {
  // A `call` frame as the call under way, or null once it answered or failed.
  function from(data) {
    if (data.phase !== "waiting" && data.phase !== "retrying") return null;
    const since = Date.now() - 1000 * (data.seconds || 0);
    return {
      side: data.side,
      timeout: data.timeout,
      since,
      retry: data.phase === "retrying" ? data.reason : "",
      attempt: data.attempt,
      attempts: data.attempts,
      // A provider's Retry-After: the next attempt is sent once this wait is over.
      nextAt: data.phase === "retrying" && data.wait ? Date.now() + 1000 * data.wait : 0,
    };
  }

  // What the line says of the call under way, now.
  function words(call) {
    const seconds = Math.round((Date.now() - call.since) / 1000);
    if (!call.retry) {
      return `${call.side}: waiting for the model's answer, ${seconds} s (each try times out after ${call.timeout} s)`;
    }
    const left = Math.ceil((call.nextAt - Date.now()) / 1000);
    const when = left > 0 ? `retrying in ${left} s` : "retrying";
    return `${call.side}: ${call.retry}, ${when} (${call.attempt} of ${call.attempts}), ${seconds} s in all`;
  }

  // What the line says once a call ended ("failed"), or the worker tries the turn again.
  function ended(data) {
    const tried = data.attempt > 1 ? ` (${data.attempt} attempts)` : "";
    if (data.phase === "failed") {
      return `${data.side}: the call failed after ${data.seconds} s${tried}: ${data.reason || "no answer"}`;
    }
    if (data.phase === "again") {
      return `${data.side}: ${data.reason || "the call failed"}, the turn is tried again in ${Math.round(data.wait)} s (${data.attempt} of ${data.attempts})`;
    }
    return "";
  }

  window.CallLine = { from, words, ended };
})();
