// The node --test reporter of gradebox's verifier runner (gradebox.verify): one JSON line per
// finished test or suite, written where --test-reporter-destination says (a pipe the runner
// reads). It runs in node's test-runner process, which imports no test file: what a test file
// prints, and the text of its errors, reach it as data, never as report lines.
const MAX_NAME = 500;
const MAX_ERROR = 2000;

function message(error) {
  if (!error) return null;
  const cause = error.cause && typeof error.cause === "object" ? error.cause : error;
  return String(cause.message ?? cause).slice(0, MAX_ERROR);
}

export default async function* report(source) {
  for await (const { type, data } of source) {
    if (type !== "test:pass" && type !== "test:fail") continue;
    const error = data.details?.error;
    yield JSON.stringify({
      passed: type === "test:pass",
      name: String(data.name ?? "").slice(0, MAX_NAME),
      nesting: Number(data.nesting) || 0,
      suite: data.details?.type === "suite",
      skip: data.skip !== undefined && data.skip !== false,
      todo: data.todo !== undefined && data.todo !== false,
      failure: error?.failureType ?? null,
      error: message(error),
    }) + "\n";
  }
}
