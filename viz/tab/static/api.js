// Fetching the plugin's routes: JSON or a one-line error, and a cache of answers by URL (a logged step never
// changes, so an answer stays valid for the page's life).

export class ApiError extends Error {}

export async function fetchJSON(url) {
  const response = await fetch(url);
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const line = body && body.error ? body.error : `${response.status} ${response.statusText}`.trim();
    throw new ApiError(line);
  }
  if (body === null) throw new ApiError(`${url.split("?")[0]}: the answer was not JSON`);
  return body;
}

const cache = new Map(); // url -> Promise of JSON

// The answer of `url`, asked once; a failed answer is forgotten so that the next draw asks again.
export function cached(url) {
  if (!cache.has(url)) {
    const promise = fetchJSON(url);
    cache.set(url, promise);
    promise.catch(() => cache.delete(url));
  }
  return cache.get(url);
}

const q = (params) => new URLSearchParams(params).toString();
export const vocabularyUrl = () => "./vocabulary";
export const runsUrl = () => "./runs";
export const attentionUrl = (run, step, sentence) => `./attention?${q({run, step, sentence})}`;
export const statisticsUrl = (run, step) => `./statistics?${q({run, step})}`;
export const translateUrl = (params) => `./translate?${q(params)}`;
export const explanationUrl = (run, step, sentence, method) => `./explanation?${q({run, step, sentence, method})}`;
export const lensUrl = (run, step, sentence) => `./lens?${q({run, step, sentence})}`;
export const explanationsUrl = (run, step) => `./explanations?${q({run, step})}`;
